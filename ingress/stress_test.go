package ingress_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// TestChurn runs many clients at once through small rings: connections come
// and go (some cut off for a bad frame), rings overflow. Every request must
// reach a SET exactly once (as itself or as an overload answer), every
// KLogin must be followed by exactly one KDisconnect, and every connection
// must be released.
func TestChurn(t *testing.T) {
	const clients, rounds, frames = 24, 4, 25
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 16, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, Loops: 3, ReadBudget: 100})
		gen, _ := envelope.NewGroupIDGen(1, time.Now().UnixNano())
		env := gen.Next()

		var mu sync.Mutex
		want := map[uint64]bool{} // stamps that must arrive once
		var wg sync.WaitGroup
		for cl := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := rand.New(rand.NewPCG(uint64(cl), 1))
				for round := range rounds {
					user := uint32(1 + cl*rounds + round)
					base := uint64(user) * 1000
					req := loginFrame(base, user)
					var stamps []uint64
					fatal := rnd.IntN(4) == 0
					for i := range uint64(frames) {
						stamp := base + 1 + i
						if fatal && i == frames/2 {
							req = append(req, header(12, 0x33, stamp)...)
							break
						}
						stamps = append(stamps, stamp)
						switch rnd.IntN(5) {
						case 0:
							req = proto.AppendShake(req, stamp)
						case 1:
							req = proto.AppendOpen(req, stamp, env)
						case 2:
							req = proto.AppendSend(req, stamp, 50, []uint32{7, 8})
						case 3:
							req = proto.AppendChat(req, stamp, uint32(rnd.IntN(100)), []byte("hey"))
						case 4:
							req = proto.AppendPing(req, stamp)
						}
					}
					mu.Lock()
					for _, s := range stamps {
						want[s] = true
					}
					mu.Unlock()
					c := dial(t, ing)
					c.send(req)
					c.expect(proto.LoginAck, base)
					if !fatal {
						c.nc.Close()
					} else {
						c.expectClosed() // the "egress" shuts it down after KFatal
						c.nc.Close()
					}
				}
			}()
		}
		wg.Wait()
		waitFor(t, "every connection released", func() bool { return ing.Conns() == 0 })

		// A connection's KDisconnect may be handled in its SET before the
		// OPENs and CHATs it sent to the other SET are: tally until every
		// request is in (or, if some is lost, until the deadline).
		var seen map[uint64]int
		var logins, disconnects map[conn.Handle]int
		for deadline := time.Now().Add(waitTime); ; time.Sleep(time.Millisecond) {
			seen = map[uint64]int{}
			logins, disconnects = map[conn.Handle]int{}, map[conn.Handle]int{}
			requests := 0
			for _, rc := range recs {
				for _, x := range rc.events() {
					switch x.ev.Kind {
					case event.KLogin:
						logins[x.ev.Conn]++
					case event.KDisconnect:
						disconnects[x.ev.Conn]++
					case event.KFatal:
					case event.KAnswer:
						if x.ev.Buf == nil {
							seen[x.ev.Stamp]++
							requests++
							break
						}
						for _, s := range stamps(x.buf) { // refusals
							seen[s]++
							requests++
						}
					default:
						seen[x.ev.Stamp]++
						requests++
					}
				}
			}
			if requests >= len(want) || time.Now().After(deadline) {
				break
			}
		}
		if len(logins) != clients*rounds {
			t.Errorf("%d KLogin; want %d", len(logins), clients*rounds)
		}
		for h, n := range logins {
			if n != 1 || disconnects[h] != 1 {
				t.Errorf("connection %v: %d KLogin, %d KDisconnect; want 1 each", h, n, disconnects[h])
			}
		}
		for s := range want {
			if seen[s] != 1 {
				t.Errorf("request stamp %d seen %d times; want once", s, seen[s])
			}
		}
		for s, n := range seen {
			if !want[s] {
				t.Errorf("stamp %d seen %d times; never sent before a close", s, n)
			}
		}
		st := ing.Stats()
		t.Logf("%s: %d frames, %d overload answers, %d stalls, %d reads", mode,
			sum(st.Frames), sum(st.Overload), st.Stalls, st.Reads)
	})
}

func sum(r ingress.RequestCounts) uint64 {
	return r.Login + r.Shake + r.Open + r.Send + r.Chat + r.Ping
}
