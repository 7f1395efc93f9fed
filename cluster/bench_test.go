package cluster

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// counter is a SET's stage: it counts the events its ring takes, and keeps
// them once keep is set.
type counter struct {
	n    atomic.Int64
	keep atomic.Bool
	mu   sync.Mutex
	evs  []event.Event
}

func (c *counter) Handle(b event.Batch) {
	c.n.Add(b.Hi - b.Lo + 1)
	if c.keep.Load() {
		c.mu.Lock()
		for q := b.Lo; q <= b.Hi; q++ {
			c.evs = append(c.evs, *b.At(q))
		}
		c.mu.Unlock()
	}
}

// wait returns the events kept once there are n.
func (c *counter) wait(tb testing.TB, n int) []event.Event {
	tb.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		if len(c.evs) >= n {
			out := slices.Clone(c.evs)
			c.mu.Unlock()
			return out
		}
		c.mu.Unlock()
	}
	tb.Fatalf("fewer than %d events reached the SET", n)
	return nil
}

// pair joins nodes 0 and 1 of a cluster of two SETs over ns, each with the
// identity auth gives it (nil: none): SET i runs on node i and counts what
// arrives in got[i]; bus[i] is node i's.
func pair(tb testing.TB, ns *embednats.Server, auth func(node int) Auth) (nodes [2]*Node, bus [2]*event.Bus, got [2]*counter) {
	tb.Helper()
	for i := range nodes {
		o := Options{URL: ns.URL(), Node: i, Nodes: 2, Sets: 2, Timeout: time.Second, Ring: 4096}
		if auth != nil {
			o.Auth = auth(i)
		}
		n, err := Join(o, "test")
		if err != nil {
			tb.Fatal(err)
		}
		n.SetAddrs("127.0.0.1:1", "")
		nodes[i], got[i] = n, new(counter)
	}
	for i, n := range nodes {
		rings := make([]event.Transport, 2)
		rings[i], rings[1-i] = localRing(tb, got[i]), n.Remote(1-i)
		bus[i] = event.NewBus(rings, 0)
		bus[i].SetRemote(func(set int) event.Transport { return n.Remote(set) })
	}
	for i, n := range nodes {
		if err := n.Start(bus[i], nil); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for i := range nodes {
			nodes[i].Close()
			bus[i].Close()
		}
	})
	return nodes, bus, got
}

// localRing is a SET's ring run by h, started.
func localRing(tb testing.TB, h ring.Handler[event.Event]) *event.Ring {
	tb.Helper()
	r, err := ring.New[event.Event](ring.Options{Size: 4096, Producers: ring.MultiProducer})
	if err != nil {
		tb.Fatal(err)
	}
	r.AddStage(h, ring.StageOptions[event.Event]{})
	if err := r.Start(); err != nil {
		tb.Fatal(err)
	}
	return r
}

// pushEvent is the ENVELOPE push of group envelope env (of SET 0, node 0's
// in pair) to user, as a split stage makes it.
func pushEvent(user uint32, env uint64) event.Event {
	ev := event.Event{Kind: event.KPush, User: user, Env: env}
	ev.SetFrame(proto.AppendEnvelope(ev.Out[:0], 0, env, 9, 100, 1))
	return ev
}

// BenchmarkCrossing sends pushes from one gateway into a SET of another:
// in bursts of 64, as a busy round would, and one at a time, each waiting
// for the one before to arrive (every crossing a message of its own).
// ns/op is the whole crossing (link stage, NATS, receiver) per event;
// cpu-ns/op is this process's CPU time per event, both gateways and the
// NATS server included.
func BenchmarkCrossing(b *testing.B) {
	for _, burst := range []int{64, 1} {
		b.Run(fmt.Sprintf("burst=%d", burst), func(b *testing.B) {
			_, bus, got := pair(b, embednats.StartTest(b), nil)
			r := bus[0].Ring(1)
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(burst, b.N-sent)
				hi, err := r.Claim(n)
				if err != nil {
					b.Fatal(err)
				}
				lo := hi - int64(n) + 1
				for q := lo; q <= hi; q++ {
					*r.At(q) = pushEvent(1, uint64(q)+1)
				}
				r.Publish(lo, hi)
				sent += n
				for burst == 1 && got[1].n.Load() < int64(sent) {
					runtime.Gosched()
				}
			}
			for got[1].n.Load() < int64(b.N) {
				time.Sleep(50 * time.Microsecond)
			}
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestCrossingDelivers: every event sent reaches the other gateway's SET once.
func TestCrossingDelivers(t *testing.T) {
	nodes, bus, got := pair(t, embednats.StartTest(t), nil)
	const n = 10000
	r := bus[0].Ring(1)
	for i := range n {
		seq, _ := r.Claim(1)
		*r.At(seq) = pushEvent(1, uint64(i)+1)
		r.Publish(seq, seq)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got[1].n.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // nothing more may come
	if g := got[1].n.Load(); g != n {
		m := &nodes[0].M
		t.Fatalf("%d events arrived; want %d (sent %d in %d messages, %d publish errors)", g, n, m.Sent.Load(), m.Messages.Load(), m.PublishErrors.Load())
	}
	if m := nodes[0].M.Messages.Load(); m >= n {
		t.Errorf("%d messages for %d events: not batched", m, n)
	}
}

// TestExpireAnswersUnavailable: an OPEN crossing past its bound is answered
// OPEN_RESULT 5 in its requester's SET, and nothing goes to the envelope's
// gateway: a share drawn there is its opener's, told by the OPEN sent again.
func TestExpireAnswersUnavailable(t *testing.T) {
	nodes, _, got := pair(t, embednats.StartTest(t), nil)
	got[0].keep.Store(true)
	env := uint64(1<<51 | 7)
	nodes[0].cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: env, Stamp: 9}, 1, 0) // user of SET 0 here, envelope of SET 1 there
	if _, ok := nodes[0].expire(time.Now().UnixNano(), nil); !ok {
		t.Fatal("expire: the rings are closing")
	}
	evs := got[0].wait(t, 1)
	f, _, err := proto.NextResponse(evs[0].Frame())
	if err != nil || f.Type != proto.OpenResult || f.Stamp != 9 {
		t.Fatalf("the requester's SET got %v (%v); want the OPEN_RESULT of stamp 9", evs[0].Kind, err)
	}
	if st, e, _ := f.OpenResult(); st != proto.OpenOverloaded || e != env {
		t.Fatalf("OPEN_RESULT %d of %#x; want 5 of %#x", st, e, env)
	}
	time.Sleep(50 * time.Millisecond) // nothing may reach the envelope's gateway
	if g := got[1].n.Load(); g != 0 {
		t.Fatalf("%d events reached the envelope's gateway; want none", g)
	}
}

// TestExpireWhileRequesterMoves: a crossing past its bound whose
// requester's SET has no owner this moment (it moves: its connections went
// with it) is dropped, and the sweeper goes on.
func TestExpireWhileRequesterMoves(t *testing.T) {
	nodes, bus, got := pair(t, embednats.StartTest(t), nil)
	n := nodes[0]
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, 0) // user of SET 0, envelope of SET 1
	bus[0].Route(0, event.NewNowhere(4096), true)
	if _, ok := n.expire(time.Now().UnixNano(), nil); !ok {
		t.Fatal("expire stopped on a requester's SET without an owner: it is not closing")
	}
	if n.cross.waiting() != 0 {
		t.Fatal("the crossing is still waiting")
	}
	time.Sleep(50 * time.Millisecond)
	if g := got[0].n.Load() + got[1].n.Load(); g != 0 {
		t.Fatalf("%d events reached a SET; want none", g)
	}
}

// TestGiveUpSET: GiveUpSET answers the crossings of one SET's users
// "unavailable" at once, in that SET, and sends nothing to the envelope's
// gateway; other SETs' crossings wait on.
func TestGiveUpSET(t *testing.T) {
	nodes, _, got := pair(t, embednats.StartTest(t), nil)
	n := nodes[0]
	far := time.Now().Add(time.Hour).UnixNano()
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, far) // user of SET 0
	n.cross.add(&event.Event{Kind: event.KOpen, User: 3, Env: 1<<51 | 8}, 1, far) // user of SET 1
	n.GiveUpSET(0)
	for deadline := time.Now().Add(5 * time.Second); got[0].n.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // nothing more may come
	if a, c, w := got[0].n.Load(), got[1].n.Load(), n.cross.waiting(); a != 1 || c != 0 || w != 1 {
		t.Fatalf("%d answers in SET 0, %d events at the envelope's gateway, %d crossings waiting; want 1, 0 and 1 (SET 1's)", a, c, w)
	}
}
