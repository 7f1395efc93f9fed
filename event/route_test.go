package event_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ring"
)

// seenStage records the Env of every event it handles.
type seenStage struct {
	mu   sync.Mutex
	envs map[uint64]int
	n    atomic.Int64
}

func (s *seenStage) Handle(b event.Batch) {
	s.mu.Lock()
	for q := b.Lo; q <= b.Hi; q++ {
		s.envs[b.At(q).Env]++
	}
	s.mu.Unlock()
	s.n.Add(b.Hi - b.Lo + 1)
}

func startedRing(t *testing.T, fused bool) (*event.Ring, *seenStage) {
	t.Helper()
	r, err := ring.New[event.Event](ring.Options{Size: 64, Producers: ring.MultiProducer, Fused: fused})
	if err != nil {
		t.Fatal(err)
	}
	st := &seenStage{envs: map[uint64]int{}}
	r.AddStage(st, ring.StageOptions[event.Event]{})
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	return r, st
}

// TestRouteWhilePublishing: while producers publish into SET 0, through the
// bus and through running views of it, its route switches back and forth
// between two rings (as a SET moves between gateways): every event reaches
// one ring exactly once, and Local follows the route.
func TestRouteWhilePublishing(t *testing.T) {
	// Through views only, nothing but the views' runs wakes the rings: an
	// event published quietly into a ring the route left must still run.
	for _, viewsOnly := range []bool{false, true} {
		name := "bus and views"
		if viewsOnly {
			name = "views only"
		}
		t.Run(name, func(t *testing.T) { routeWhilePublishing(t, viewsOnly) })
	}
}

func routeWhilePublishing(t *testing.T, viewsOnly bool) {
	a, seenA := startedRing(t, true)
	b, seenB := startedRing(t, true)
	other, _ := startedRing(t, false)
	bus := event.NewBus([]event.Transport{a, other}, 0)
	const producers, each = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var marked atomic.Bool
			view := bus.RunningBus(func(int) { marked.Store(true) })
			pub := bus
			if viewsOnly || p%2 == 1 {
				pub = view // half publish as an epoll loop does, running the SET themselves
			}
			for i := range each {
				s, ok := pub.ClaimAnswer(0)
				for !ok {
					time.Sleep(10 * time.Microsecond)
					s, ok = pub.ClaimAnswer(0)
				}
				*s.Event() = event.Event{Kind: event.KPing, Env: uint64(p*each + i + 1)}
				s.Publish()
				if i%16 == 0 {
					// Let the rings' goroutines park, as they do between bursts.
					time.Sleep(50 * time.Microsecond)
				}
				if marked.Swap(false) {
					view.Run(0, 256)
				}
			}
		}()
	}
	var flipper sync.WaitGroup
	flipper.Add(1)
	go func() {
		defer flipper.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			if i%2 == 0 {
				bus.Route(0, b, false)
			} else {
				bus.Route(0, a, false)
			}
		}
	}()
	wg.Wait()
	close(stop)
	flipper.Wait()
	// Nothing publishes or runs any more: whatever was published and not run
	// waits in a ring for good.
	deadline := time.Now().Add(5 * time.Second)
	for seenA.n.Load()+seenB.n.Load() < producers*each && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := seenA.n.Load() + seenB.n.Load(); n != producers*each {
		t.Fatalf("%d of %d events handled before the rings were closed: some wait in a ring nobody runs", n, producers*each)
	}
	a.Close()
	b.Close()
	for env := uint64(1); env <= producers*each; env++ {
		if n := seenA.envs[env] + seenB.envs[env]; n != 1 {
			t.Fatalf("event %d handled %d times; want once", env, n)
		}
	}
	if seenA.n.Load() == 0 || seenB.n.Load() == 0 {
		t.Fatalf("the route never switched: %d events on a, %d on b", seenA.n.Load(), seenB.n.Load())
	}
	bus.Route(1, other, true)
	if got := bus.Local(); len(got) != 1 || got[0] != 0 || bus.IsLocal(1) || !bus.IsLocal(0) {
		t.Fatalf("after SET 1 became remote: Local %v, IsLocal(1) %v", got, bus.IsLocal(1))
	}
	other.Close()
}

// TestLeaving: a SET being handed over refuses requests, through the bus
// and through a running view, but takes answers on the same transport; it
// is neither Local nor IsLocal; a Route ends it.
func TestLeaving(t *testing.T) {
	a, seen := startedRing(t, true)
	b, _ := startedRing(t, true)
	bus := event.NewBus([]event.Transport{a, b}, 8)
	defer bus.Close()
	view := bus.RunningBus(func(int) {})
	bus.SetLeaving(0)
	for _, bb := range []*event.Bus{bus, view} {
		if _, ok := bb.ClaimRequest(0); ok {
			t.Fatal("a request claimed in a leaving SET")
		}
		s, ok := bb.ClaimAnswer(0)
		if !ok {
			t.Fatal("an answer refused by a leaving SET")
		}
		*s.Event() = event.Event{Kind: event.KAnswer, Env: 1}
		s.Publish()
		s, ok = bb.ClaimRequest(1)
		if !ok {
			t.Fatal("a request refused by the other SET")
		}
		*s.Event() = event.Event{Kind: event.KShake}
		s.Publish()
	}
	if !bus.Leaving(0) || bus.IsLocal(0) || len(bus.Local()) != 1 || bus.Local()[0] != 1 {
		t.Fatalf("leaving %v, local %v, Local %v; want SET 0 leaving and neither", bus.Leaving(0), bus.IsLocal(0), bus.Local())
	}
	for deadline := time.Now().Add(5 * time.Second); seen.n.Load() < 2 && time.Now().Before(deadline); {
		view.Run(0, 64)
		time.Sleep(time.Millisecond)
	}
	if n := seen.n.Load(); n != 2 {
		t.Fatalf("%d answers reached the leaving SET's ring; want 2", n)
	}
	bus.Route(0, a, false)
	if bus.Leaving(0) || !bus.IsLocal(0) {
		t.Fatal("routed again, still leaving")
	}
}

// TestStray: an answer a stage sends to a connection of a SET that runs
// elsewhere now is dropped and counted, whether the SET's route takes it at
// once (a link) or refuses it (between owners, retried); any other event
// goes on as usual, and so do the events after a stray.
func TestStray(t *testing.T) {
	a, _ := startedRing(t, true)
	link, seenLink := startedRing(t, true)
	bus := event.NewBus([]event.Transport{a, link}, 0)
	defer bus.Close()
	out := event.NewOutbox(bus, 0)
	send := func(kind event.Kind, env uint64, c *conn.Conn) {
		ev := out.Put(1)
		ev.Kind, ev.Env = kind, env
		if c != nil {
			ev.Conn = conn.HandleOf(c)
		}
		out.Done()
	}
	local := new(conn.Conn)
	send(event.KAnswer, 1, local) // SET 1 runs here: delivered
	bus.Route(1, link, true)      // SET 1 moved: its route is the link
	send(event.KAnswer, 2, local) // stray
	send(event.KPush, 3, nil)     // not an answer to a connection here: crosses
	bus.Route(1, event.NewNowhere(64), true)
	send(event.KAnswer, 4, local) // held, then stray at the retry
	send(event.KPush, 5, nil)     // held behind it
	bus.Route(1, link, true)
	out.Retry()
	for deadline := time.Now().Add(5 * time.Second); seenLink.n.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // nothing more may come
	seenLink.mu.Lock()
	defer seenLink.mu.Unlock()
	if bus.Strays() != 2 || seenLink.envs[1] != 1 || seenLink.envs[3] != 1 || seenLink.envs[5] != 1 || seenLink.envs[2] != 0 || seenLink.envs[4] != 0 || out.Held() != 0 {
		t.Fatalf("%d strays, events through SET 1's transports %v, held %d; want answers 2 and 4 stray, 1, 3 and 5 through", bus.Strays(), seenLink.envs, out.Held())
	}
}
