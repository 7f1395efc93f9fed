package cluster

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"hongbao/event"
	"hongbao/internal/embednats"
	"hongbao/proto"
	"hongbao/ring"
)

// counter is a SET's stage that counts the events it gets.
type counter struct{ n atomic.Int64 }

func (c *counter) Handle(b event.Batch) { c.n.Add(b.Hi - b.Lo + 1) }

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

// TestCancelSentAgain: an OPEN crossing past its bound is cancelled at the
// envelope's gateway at once and again after each of resendAfter, and no
// more: a cancel written into a NATS connection that just died is lost.
func TestCancelSentAgain(t *testing.T) {
	nodes, _, got := pair(t, embednats.StartTest(t), nil)
	nodes[0].cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, 0) // user of SET 0 here, envelope of SET 1 there
	now := time.Now().UnixNano()
	arrived := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); got[1].n.Load() < want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // nothing more may come
		if g := got[1].n.Load(); g != want {
			t.Fatalf("%d cancels reached the envelope's gateway; want %d", g, want)
		}
	}
	for i, at := range []int64{now, now + int64(resendAfter[0]) + 1e8, now + int64(resendAfter[0]+resendAfter[1]) + 2e8, now + int64(time.Hour)} {
		if _, ok := nodes[0].expire(at, nil); !ok {
			t.Fatal("expire: the rings are closing")
		}
		arrived(int64(min(i+1, 1+len(resendAfter))))
	}
}

// TestCancelWhileNoOwner: a cancel due while the envelope's SET has no
// owner (between owners, where SETs fail over) neither stops the sweeper
// nor is counted as sent: it reaches the SET once it has an owner again,
// and is then sent again after each of resendAfter, as any other.
func TestCancelWhileNoOwner(t *testing.T) {
	nodes, bus, got := pair(t, embednats.StartTest(t), nil)
	n := nodes[0]
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, 0)
	bus[0].Route(1, event.NewNowhere(4096), true)
	now := time.Now().UnixNano()
	for _, at := range []int64{now, now + int64(noOwnerRetry) + 1e8} {
		if _, ok := n.expire(at, nil); !ok {
			t.Fatal("expire stopped on a SET without an owner: it is not closing")
		}
	}
	if len(n.resends) != 1 || n.resends[0].sent != 0 {
		t.Fatalf("resends %+v; want the one cancel, not yet sent", n.resends)
	}
	bus[0].Route(1, n.Link(1), true)
	for deadline := time.Now().Add(5 * time.Second); got[1].n.Load() < 1 && time.Now().Before(deadline); {
		n.expire(time.Now().UnixNano()+int64(noOwnerRetry), nil)
		time.Sleep(10 * time.Millisecond)
	}
	if g := got[1].n.Load(); g != 1 {
		t.Fatalf("%d cancels reached the new owner; want 1", g)
	}
	if len(n.resends) != 1 || n.resends[0].sent != 1 {
		t.Fatalf("resends %+v; want the cancel sent once, to be sent again", n.resends)
	}
	// Given up once the SET stays without an owner past noOwnerGiveUp.
	n.resends = n.resends[:0]
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 8}, 1, 0)
	bus[0].Route(1, event.NewNowhere(4096), true)
	n.expire(now, nil)
	n.resends[0].until = now
	n.expire(time.Now().UnixNano()+int64(time.Hour), nil)
	if len(n.resends) != 0 {
		t.Fatalf("resends %+v; want none once given up", n.resends)
	}
}

// TestExpireWhileRequesterMoves: a crossing past its bound whose
// requester's SET has no owner this moment (it moves: its connections went
// with it) is cancelled at the envelope's gateway all the same, and the
// sweeper goes on.
func TestExpireWhileRequesterMoves(t *testing.T) {
	nodes, bus, got := pair(t, embednats.StartTest(t), nil)
	n := nodes[0]
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, 0) // user of SET 0, envelope of SET 1
	bus[0].Route(0, event.NewNowhere(4096), true)
	if _, ok := n.expire(time.Now().UnixNano(), nil); !ok {
		t.Fatal("expire stopped on a requester's SET without an owner: it is not closing")
	}
	for deadline := time.Now().Add(5 * time.Second); got[1].n.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if g := got[1].n.Load(); g != 1 {
		t.Fatalf("%d cancels reached the envelope's gateway; want 1", g)
	}
}

// TestGiveUpSET: the crossings of a leaving SET's users are given up at
// once, their OPENs cancelled at the envelope's gateway; other SETs'
// crossings wait on.
func TestGiveUpSET(t *testing.T) {
	nodes, _, got := pair(t, embednats.StartTest(t), nil)
	n := nodes[0]
	far := time.Now().Add(time.Hour).UnixNano()
	n.cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, far) // user of SET 0
	n.cross.add(&event.Event{Kind: event.KOpen, User: 3, Env: 1<<51 | 8}, 1, far) // user of SET 1
	n.GiveUpSET(0)
	for deadline := time.Now().Add(5 * time.Second); got[1].n.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if g, w := got[1].n.Load(), n.cross.waiting(); g != 1 || w != 1 {
		t.Fatalf("%d cancels sent, %d crossings waiting; want 1 and 1, SET 1's", g, w)
	}
}

// TestCancelEarly: a cancel that reaches the envelope's gateway while the
// envelope's SET is on its way in (the sender saw the owner's record change
// first) waits there until the SET runs, then reaches it; one while the SET
// leaves goes into its ring at once (the new owner follows it); one whose
// SET never comes is dropped after earlyHold, counted as misrouted.
func TestCancelEarly(t *testing.T) {
	nodes, bus, got := pair(t, embednats.StartTest(t), nil)
	n, far := nodes[1], time.Now().Add(time.Hour).UnixNano()
	held := func() int {
		n.expiring.Lock()
		defer n.expiring.Unlock()
		return len(n.early)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 5 s (%d held, %d arrived, %d misrouted)", what, held(), got[1].n.Load(), n.M.Misrouted.Load())
			}
		}
	}
	local := bus[1].Ring(1)
	bus[1].Route(1, event.NewNowhere(4096), true) // on its way in to node 1
	nodes[0].cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 7}, 1, far)
	nodes[0].GiveUpSET(0)
	waitFor("the cancel held", func() bool { return held() == 1 })
	n.expire(time.Now().UnixNano(), nil)
	if g := got[1].n.Load(); g != 0 || held() != 1 {
		t.Fatalf("%d cancels reached SET 1 before it runs here, %d held; want 0 and 1", g, held())
	}
	bus[1].Route(1, local, false) // it runs here now
	n.expire(time.Now().UnixNano(), nil)
	waitFor("the held cancel delivered", func() bool { return got[1].n.Load() == 1 && held() == 0 })

	bus[1].SetLeaving(1)
	nodes[0].cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 8}, 1, far)
	nodes[0].GiveUpSET(0)
	waitFor("the cancel into the leaving SET's ring", func() bool { return got[1].n.Load() == 2 && held() == 0 })

	bus[1].Route(1, event.NewNowhere(4096), true)
	nodes[0].cross.add(&event.Event{Kind: event.KOpen, User: 2, Env: 1<<51 | 9}, 1, far)
	nodes[0].GiveUpSET(0)
	waitFor("the third cancel held", func() bool { return held() == 1 })
	n.expire(time.Now().Add(earlyHold+time.Second).UnixNano(), nil)
	if g, h, m := got[1].n.Load(), held(), n.M.Misrouted.Load(); g != 2 || h != 0 || m != 1 {
		t.Fatalf("past the hold: %d arrived, %d held, %d misrouted; want 2, 0, 1", g, h, m)
	}
}
