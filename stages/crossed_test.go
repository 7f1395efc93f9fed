package stages_test

import (
	"encoding/binary"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// recorder is the stage of a ring standing for another gateway: it keeps
// what is sent there.
type recorder struct {
	mu  sync.Mutex
	evs []event.Event
	j   *journal.Journal // when set, an event is recorded once its record is durable, as the cluster's link sends it
}

func (r *recorder) Handle(b event.Batch) {
	for q := b.Lo; q <= b.Hi; q++ {
		ev := b.At(q)
		if r.j != nil && ev.JPos != 0 {
			if err := r.j.Wait(ev.JPID, ev.JPos); err != nil {
				panic(err)
			}
		}
		r.mu.Lock()
		r.evs = append(r.evs, *ev)
		r.mu.Unlock()
	}
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

// crossStep is an OPEN of user 3's from another gateway: a connection
// handle without a connection, its Gen the crossing.
type crossStep struct {
	xid    uint32
	status uint8 // the OPEN's answer
}

// crossCases: a share, once drawn, is its user's: every OPEN after the
// first answers "already" with it, whatever became of the answers before
// (the requester's gateway may have given up on them: it no longer sends
// anything back to take the share).
var crossCases = []struct {
	name  string
	steps []crossStep
}{
	{"drawn", []crossStep{{7, proto.OpenOK}}},
	{"drawn, asked again", []crossStep{{7, proto.OpenOK}, {8, proto.OpenAlready}}},
	{"drawn, asked again twice", []crossStep{{7, proto.OpenOK}, {8, proto.OpenAlready}, {9, proto.OpenAlready}}},
}

// crossWorld is SET 0 on this gateway, with SET 1 on another one (a ring
// that records what is sent there), and user 3 of SET 1's envelope env.
type crossWorld struct {
	t       *testing.T
	away    *recorder
	link    *ring.Ring[event.Event]
	bus     *event.Bus
	sets    []*set.SET
	answers int
}

// newCrossWorld builds the SETs on j (nil: no journal), restores them with
// restore, if any, and starts them.
func newCrossWorld(t *testing.T, j *journal.Journal, restore func(sets []*set.SET)) *crossWorld {
	t.Helper()
	w := &crossWorld{t: t, away: &recorder{j: j}}
	link, err := ring.New[event.Event](ring.Options{Size: 64, Producers: ring.MultiProducer})
	if err != nil {
		t.Fatal(err)
	}
	link.AddStage(w.away, ring.StageOptions[event.Event]{})
	remote := func(s int) event.Transport {
		if s == 1 {
			return link
		}
		return nil
	}
	lim := stages.Limits{MaxShares: 100, MaxTotal: 20000, TTL: time.Hour}
	o := set.Options{Ring: 64, Limits: lim, MaxPending: 64 << 10, Seed: 1, Remote: remote}
	if j != nil {
		o.Journal = j
	}
	w.link = link
	if w.bus, w.sets, err = set.Build(2, o); err != nil {
		t.Fatal(err)
	}
	if restore != nil {
		restore(w.sets)
	}
	if j != nil {
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := link.Start(); err != nil {
		t.Fatal(err)
	}
	if err := w.bus.Ring(0).Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *crossWorld) publish(fill func(*event.Event)) {
	r := w.bus.Ring(0)
	seq, err := r.Claim(1)
	if err != nil {
		w.t.Fatal(err)
	}
	*r.At(seq) = event.Event{}
	fill(r.At(seq))
	r.Publish(seq, seq)
}

// send makes user 2 (SET 0, here) send 100 fen to user 3 (SET 1, the other
// gateway) and returns the envelope's id, from its ENVELOPE push.
func (w *crossWorld) send() uint64 {
	w.publish(func(ev *event.Event) {
		ev.Kind, ev.User, ev.Total, ev.N, ev.Stamp = event.KSend, 2, 100, 1, 1
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, 3)
	})
	w.answers++
	return w.away.wait(w.t, 1)[0].Env
}

// step runs st on env, an OPEN, checks its answer and returns its share.
func (w *crossWorld) step(env uint64, st crossStep) uint32 {
	w.t.Helper()
	w.publish(func(ev *event.Event) {
		ev.Kind, ev.User, ev.Env, ev.Conn, ev.Stamp = event.KOpen, 3, env, conn.Handle{Gen: st.xid}, uint64(st.xid)
	})
	w.answers++
	a := w.away.wait(w.t, w.answers)[w.answers-1]
	f, _, _ := proto.NextResponse(a.Frame())
	status, _, share := f.OpenResult()
	if a.Kind != event.KAnswer || a.Conn.Gen != st.xid || status != st.status {
		w.t.Fatalf("OPEN of crossing %d: %v to crossing %d, status %d; want an answer to %d, status %d", st.xid, a.Kind, a.Conn.Gen, status, st.xid, st.status)
	}
	return share
}

// close drains SET 0 (every step handled) and returns its ledger.
func (w *crossWorld) close() ledger.Stats {
	if err := w.bus.Close(); err != nil {
		w.t.Fatal(err)
	}
	w.link.Close()
	return ledger.Sum(set.Ledgers(w.sets))
}

// checkOnce checks that every answer told the same share, and the ledger
// counts it once.
func checkOnce(t *testing.T, st ledger.Stats, shares []uint32) {
	t.Helper()
	for _, s := range shares[1:] {
		if s != shares[0] {
			t.Errorf("the answers told shares %v; want one share, told again", shares)
		}
	}
	if st.Envelopes.Opened != 1 || st.Envelopes.OpenedAmount != uint64(shares[0]) {
		t.Errorf("opened %d, %d fen; want 1 share of %d fen", st.Envelopes.Opened, st.Envelopes.OpenedAmount, shares[0])
	}
	if err := st.CheckEnvelopes(); err != nil {
		t.Error(err)
	}
}

// TestCrossedOnce runs crossCases on one SET.
func TestCrossedOnce(t *testing.T) {
	for _, c := range crossCases {
		t.Run(c.name, func(t *testing.T) {
			w := newCrossWorld(t, nil, nil)
			env := w.send()
			var shares []uint32
			for _, st := range c.steps {
				shares = append(shares, w.step(env, st))
			}
			checkOnce(t, w.close(), shares)
		})
	}
}

// TestCrossedRestored runs crossCases with SET 0 restored between every two
// steps, as the gateway it moved or failed over to restores it: from its
// journal, or from a snapshot. The new gateway tells the share the old one
// drew.
func TestCrossedRestored(t *testing.T) {
	for _, from := range []string{"journal", "snapshot"} {
		for _, c := range crossCases {
			t.Run(from+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				var parts []stages.Part
				var mu sync.Mutex
				incarnation := func(i int, restore func([]*set.SET)) *crossWorld {
					d := dir
					if from == "snapshot" {
						d = filepath.Join(dir, strconv.Itoa(i)) // a fresh journal: the snapshot holds it all
					}
					var w *crossWorld
					j, err := journal.Open(journal.Options{Dir: d, Sets: 2, OnDurable: func() { w.bus.Tick() }})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { j.Close() })
					w = newCrossWorld(t, j, func(sets []*set.SET) {
						sets[0].Snapshots(func(p stages.Part) { mu.Lock(); parts = append(parts, p); mu.Unlock() })
						if restore != nil {
							restore(sets)
						}
						if from == "journal" {
							if err := set.Replay(j, journal.From{}, sets, time.Now().UnixNano(), nil); err != nil {
								t.Fatal(err)
							}
						}
					})
					return w
				}
				end := func(w *crossWorld) ledger.Stats {
					if from == "snapshot" {
						mu.Lock()
						parts = parts[:0]
						mu.Unlock()
						w.publish(func(ev *event.Event) { ev.Kind, ev.Env = event.KSnapshot, 1 })
					}
					return w.close()
				}
				load := func(sets []*set.SET) {
					mu.Lock()
					defer mu.Unlock()
					if from == "snapshot" && len(parts) != 2 {
						t.Fatalf("%d snapshot parts; want the shake's and the split's", len(parts))
					}
					for _, p := range parts {
						if _, err := sets[0].Load(uint16(p.PID), p.Data, time.Now().UnixNano()); err != nil {
							t.Fatal(err)
						}
					}
				}
				w := incarnation(0, nil)
				env := w.send()
				end(w)
				var st ledger.Stats
				var shares []uint32
				for i, step := range c.steps {
					w = incarnation(i+1, load)
					shares = append(shares, w.step(env, step))
					st = end(w)
				}
				checkOnce(t, st, shares)
			})
		}
	}
}
