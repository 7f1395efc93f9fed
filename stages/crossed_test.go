package stages_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"hongbao/conn"
	"hongbao/event"
	"hongbao/ledger"
	"hongbao/proto"
	"hongbao/ring"
	"hongbao/set"
	"hongbao/stages"
)

// recorder is the stage of a ring standing for another gateway: it keeps
// what is sent there.
type recorder struct {
	mu  sync.Mutex
	evs []event.Event
}

func (r *recorder) Handle(b event.Batch) {
	r.mu.Lock()
	for q := b.Lo; q <= b.Hi; q++ {
		r.evs = append(r.evs, *b.At(q))
	}
	r.mu.Unlock()
}

func (r *recorder) wait(t *testing.T, n int) []event.Event {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		if len(r.evs) >= n {
			out := append([]event.Event(nil), r.evs...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
	}
	t.Fatalf("fewer than %d events reached the other gateway", n)
	return nil
}

// TestCrossedCancels: OPENs from another gateway (a connection handle
// without a connection, its Gen the crossing) and their cancels (KUnopen
// with amount 0). A share is taken back only once every answer that told
// it has been withdrawn: one delivered answer keeps it.
func TestCrossedCancels(t *testing.T) {
	type step struct {
		open   bool // an OPEN of crossing xid, else its cancel
		xid    uint32
		status uint8 // the OPEN's answer
	}
	for _, c := range []struct {
		name  string
		steps []step
		kept  bool
	}{
		{"drawn, cancelled", []step{{true, 7, proto.OpenOK}, {false, 7, 0}}, false},
		{"another crossing's cancel", []step{{true, 7, proto.OpenOK}, {false, 9, 0}}, true},
		{"already told, the drawing one cancelled", []step{{true, 7, proto.OpenOK}, {true, 8, proto.OpenAlready}, {false, 7, 0}}, true},
		{"told, the already one cancelled", []step{{true, 7, proto.OpenOK}, {true, 8, proto.OpenAlready}, {false, 8, 0}}, true},
		{"both cancelled", []step{{true, 7, proto.OpenOK}, {true, 8, proto.OpenAlready}, {false, 8, 0}, {false, 7, 0}}, false},
		{"cancelled twice, opened again", []step{{true, 7, proto.OpenOK}, {false, 7, 0}, {false, 7, 0}, {true, 8, proto.OpenOK}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			away := &recorder{}
			link, err := ring.New[event.Event](ring.Options{Size: 64, Producers: ring.MultiProducer})
			if err != nil {
				t.Fatal(err)
			}
			link.AddStage(away, ring.StageOptions[event.Event]{})
			remote := func(s int) event.Transport {
				if s == 1 {
					return link
				}
				return nil
			}
			lim := stages.Limits{MaxShares: 100, MaxTotal: 20000, TTL: time.Hour}
			bus, sets, err := set.Build(2, set.Options{Ring: 64, Limits: lim, MaxPending: 64 << 10, Seed: 1, Remote: remote})
			if err != nil {
				t.Fatal(err)
			}
			if err := link.Start(); err != nil {
				t.Fatal(err)
			}
			if err := bus.Ring(0).Start(); err != nil {
				t.Fatal(err)
			}
			publish := func(fill func(*event.Event)) {
				r := bus.Ring(0)
				seq, err := r.Claim(1)
				if err != nil {
					t.Fatal(err)
				}
				*r.At(seq) = event.Event{}
				fill(r.At(seq))
				r.Publish(seq, seq)
			}
			// User 2 (SET 0, here) sends 100 fen to user 3 (SET 1, the other gateway).
			publish(func(ev *event.Event) {
				ev.Kind, ev.User, ev.Total, ev.N, ev.Stamp = event.KSend, 2, 100, 1, 1
				ev.Buf = bytebufferpool.Get()
				ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, 3)
			})
			env := away.wait(t, 1)[0].Env // its ENVELOPE push
			answers := 1
			for _, st := range c.steps {
				if st.open {
					publish(func(ev *event.Event) {
						ev.Kind, ev.User, ev.Env, ev.Conn, ev.Stamp = event.KOpen, 3, env, conn.Handle{Gen: st.xid}, uint64(st.xid)
					})
					answers++
					a := away.wait(t, answers)[answers-1]
					f, _, _ := proto.NextResponse(a.Frame())
					if status, _, _ := f.OpenResult(); a.Kind != event.KAnswer || a.Conn.Gen != st.xid || status != st.status {
						t.Fatalf("OPEN of crossing %d: %v to crossing %d, status %d; want an answer to %d, status %d", st.xid, a.Kind, a.Conn.Gen, status, st.xid, st.status)
					}
					continue
				}
				publish(func(ev *event.Event) {
					ev.Kind, ev.User, ev.Env, ev.Conn = event.KUnopen, 3, env, conn.Handle{Gen: st.xid}
				})
			}
			if err := bus.Close(); err != nil { // drains SET 0: every step handled
				t.Fatal(err)
			}
			link.Close()
			st := ledger.Sum(set.Ledgers(sets))
			if kept := st.Envelopes.Opened == 1; kept != c.kept {
				t.Errorf("share drawn and kept: %v (opened %d, %d fen); want %v", kept, st.Envelopes.Opened, st.Envelopes.OpenedAmount, c.kept)
			}
			if err := st.CheckEnvelopes(); err != nil {
				t.Error(err)
			}
		})
	}
}
