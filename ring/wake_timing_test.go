//go:build unix

// unix only: BenchmarkIdleCost reads getrusage.

package ring

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	disruptor "github.com/smarty/go-disruptor"
)

// What a parked stage costs: how long a published event waits for a parked
// consumer to start handling it, and how much CPU hundreds of parked stages
// burn with no traffic. Both beside go-disruptor (whose default wait strategy
// sleep-polls: Idle is time.Sleep(500ns)) and channels (whose receivers
// park). These benchmarks sit inside package ring so that they can check,
// through parked, that our stages really are parked before they measure.

// parked is the number of goroutines parked on r's signals: stages waiting
// for the publish cursor or for an upstream stage, producers waiting for room.
func (r *Ring[T]) parked() int {
	n := int(r.pubSig.waiters.Load())
	for _, s := range r.stages {
		n += int(s.sig.waiters.Load())
	}
	return n
}

// waitFor polls cond every ms until it holds, failing b after 10 s.
func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not after 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// wakeEvent carries the time of its publication (on the monotonic clock,
// since wakeBase) to the consumer.
type wakeEvent struct {
	i  int64
	t0 time.Duration
}

var wakeBase = time.Now()

func since() time.Duration { return time.Since(wakeBase) }

// wakeTarget is one implementation under BenchmarkWakeLatency. start builds it
// and returns: publish, which stamps and publishes event i; consumed, which
// counts the events the consumer handled; idle, which reports whether the
// consumer is waiting in its idle state (for our ring: parked on its signal);
// and stop, which tears it down and waits for its goroutines. The consumer
// stores each event's latency into lat[i].
type wakeTarget struct {
	name  string
	start func(b *testing.B, lat []time.Duration) (publish func(i int64), consumed func() int64, idle func() bool, stop func())
}

var wakeTargets = []wakeTarget{
	{"ring", func(b *testing.B, lat []time.Duration) (func(int64), func() int64, func() bool, func()) {
		return wakeRing(b, lat, WaitPark)
	}},
	{"ring-spin", func(b *testing.B, lat []time.Duration) (func(int64), func() int64, func() bool, func()) {
		return wakeRing(b, lat, WaitSpin)
	}},
	{"disruptor", wakeDisruptor},
	{"chan", wakeChan},
}

// BenchmarkWakeLatency measures publish → handler start for a consumer that
// has been idle for at least 1 ms, one event at a time. One op is one event;
// ns/op is suppressed (it is mostly the 1 ms gap) and the latency quantiles
// are reported in µs.
//
// producer=sleeps: the producer blocks (sleeps) right after publishing, so the
// Go scheduler may run the woken consumer on the producer's P at once.
// producer=spins: the producer keeps its P busy until the event is handled,
// so the consumer must be woken onto the other P: a futex wake of an idle M,
// the case of a producer that has more work to do.
func BenchmarkWakeLatency(b *testing.B) {
	for _, spins := range []bool{false, true} {
		producer := "sleeps"
		if spins {
			producer = "spins"
		}
		for _, tg := range wakeTargets {
			b.Run("producer="+producer+"/impl="+tg.name, func(b *testing.B) {
				b.ReportAllocs()
				lat := make([]time.Duration, b.N)
				publish, consumed, idle, stop := tg.start(b, lat)
				defer stop()
				waitFor(b, "consumer idle before the first event", idle)
				b.ResetTimer()
				for i := range int64(b.N) {
					publish(i)
					if spins {
						for deadline := since() + 10*time.Second; consumed() <= i; {
							if since() > deadline {
								b.Fatalf("event %d not handled after 10 s: lost wake-up", i)
							}
						}
					}
					// 1 ms at least: the consumer handles i and then goes idle.
					time.Sleep(time.Millisecond)
					waitFor(b, "event handled and consumer idle again", func() bool { return consumed() > i && idle() })
				}
				b.StopTimer()
				slices.Sort(lat)
				q := func(p float64) float64 { // nearest rank
					k := int(math.Ceil(p*float64(len(lat)))) - 1
					return float64(lat[max(k, 0)]) / float64(time.Microsecond)
				}
				b.ReportMetric(q(0.50), "p50-us")
				b.ReportMetric(q(0.99), "p99-us")
				b.ReportMetric(q(1), "max-us")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// wakeHandler stamps the latency of each event it is handed.
type wakeHandler struct {
	lat      []time.Duration
	consumed atomic.Int64
}

func (h *wakeHandler) handle(e *wakeEvent) {
	h.lat[e.i] = since() - e.t0
	h.consumed.Store(e.i + 1)
}

func wakeRing(b *testing.B, lat []time.Duration, w Wait) (func(int64), func() int64, func() bool, func()) {
	r, err := New[wakeEvent](Options{Size: 1024, Wait: w})
	if err != nil {
		b.Fatal(err)
	}
	h := &wakeHandler{lat: lat}
	r.AddStage(HandlerFunc[wakeEvent](func(bt Batch[wakeEvent]) {
		for s := bt.Lo; s <= bt.Hi; s++ {
			h.handle(bt.At(s))
		}
	}), StageOptions[wakeEvent]{})
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	publish := func(i int64) {
		hi, err := r.Claim(1)
		if err != nil {
			panic(err)
		}
		*r.At(hi) = wakeEvent{i: i, t0: since()}
		r.Publish(hi, hi)
	}
	idle := func() bool { return r.parked() == 1 }
	if w == WaitSpin {
		idle = func() bool { return true } // it never parks: the reference floor
	}
	return publish, h.consumed.Load, idle, func() { r.Close() }
}

type wakeDisruptorHandler struct {
	wakeHandler
	slots []wakeEvent
}

func (h *wakeDisruptorHandler) Handle(lo, hi int64) {
	for s := lo; s <= hi; s++ {
		h.handle(&h.slots[s&int64(len(h.slots)-1)])
	}
}

func wakeDisruptor(b *testing.B, lat []time.Duration) (func(int64), func() int64, func() bool, func()) {
	h := &wakeDisruptorHandler{wakeHandler: wakeHandler{lat: lat}, slots: make([]wakeEvent, 1024)}
	d, err := disruptor.New(disruptor.Options.BufferCapacity(1024), disruptor.Options.NewHandlerGroup(h))
	if err != nil {
		b.Fatal(err)
	}
	listening := make(chan struct{})
	go func() { defer close(listening); d.Listen() }()
	publish := func(i int64) {
		hi := d.Reserve(1)
		h.slots[hi&1023] = wakeEvent{i: i, t0: since()}
		d.Commit(hi, hi)
	}
	// Idle after 1 ms without events: its listener sleep-polls.
	return publish, h.consumed.Load, func() bool { return true }, func() { d.Close(); <-listening }
}

func wakeChan(b *testing.B, lat []time.Duration) (func(int64), func() int64, func() bool, func()) {
	h := &wakeHandler{lat: lat}
	ch := make(chan wakeEvent, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range ch {
			h.handle(&e)
		}
	}()
	publish := func(i int64) { ch <- wakeEvent{i: i, t0: since()} }
	// Idle after 1 ms without events: the receiver is parked in the channel.
	return publish, h.consumed.Load, func() bool { return true }, func() { close(ch); <-done }
}

// Idle cost: idleRings rings (or disruptors, or channel chains) of idleStages
// chained stages each, 1,024 stage goroutines, every one of which has handled
// one event and gone idle.
const (
	idleRings  = 256
	idleStages = 4
	idleWindow = time.Second // of idle wall time per op: one op fills -benchtime 1s
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(os.NewSyscallError("getrusage", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdleCost reports the CPU the process burns (getrusage user+system
// time per wall second, in % of one core) while idleRings × idleStages stage
// goroutines wait for events that do not come. impl=none is the harness alone.
// One op is idleWindow of wall time; ns/op is suppressed.
func BenchmarkIdleCost(b *testing.B) {
	for _, tg := range []struct {
		name  string
		build func(b *testing.B) (stop func())
	}{
		{"ring", idleRing},
		{"disruptor", idleDisruptor},
		{"chan", idleChan},
		{"none", func(*testing.B) func() { return func() {} }},
	} {
		b.Run("impl="+tg.name, func(b *testing.B) {
			b.ReportAllocs()
			// No collection in the window: collect first, then switch the
			// collector off until the window ends. (Not runtime.GC after
			// the build: among 1,024 sleep-polling disruptor handlers it
			// took about 2 minutes here.)
			runtime.GC()
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			stop := tg.build(b)
			defer stop()
			b.ResetTimer()
			cpu0, t0 := cpuTime(b), time.Now()
			time.Sleep(time.Duration(b.N) * idleWindow)
			cpu, wall := cpuTime(b)-cpu0, time.Since(t0)
			b.StopTimer()
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "%cpu")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func idleRing(b *testing.B) func() {
	rings := make([]*Ring[int64], idleRings)
	for i := range rings {
		r, err := New[int64](Options{Size: 1024})
		if err != nil {
			b.Fatal(err)
		}
		var up []*Stage[int64]
		for range idleStages {
			up = []*Stage[int64]{r.AddStage(HandlerFunc[int64](func(Batch[int64]) {}), StageOptions[int64]{After: up})}
		}
		if err := r.Start(); err != nil {
			b.Fatal(err)
		}
		hi, err := r.Claim(1)
		if err != nil {
			b.Fatal(err)
		}
		r.Publish(hi, hi)
		rings[i] = r
	}
	// Every stage has handled the event (the last one has) and parked: the
	// first on the publish cursor, each other one on its upstream stage.
	waitFor(b, "every ring stage parked", func() bool {
		for _, r := range rings {
			if r.stages[idleStages-1].Sequence() != 0 || r.parked() != idleStages {
				return false
			}
		}
		return true
	})
	return func() {
		for _, r := range rings {
			r.Close()
		}
	}
}

type idleDisruptorHandler struct{ handled *atomic.Int64 }

func (h idleDisruptorHandler) Handle(lo, hi int64) {
	if h.handled != nil {
		h.handled.Add(hi - lo + 1)
	}
}

// idleDisruptor's listeners sleep-poll (Idle: time.Sleep(500ns)) whether or
// not they have handled an event, so the event only shows that every handler
// ran once. 1,024 sleep-polling goroutines saturate both cores and starve one
// another: an event can take seconds to pass 4 groups (go-disruptor's own
// idle cost, measured here). So each event is committed before its listeners
// start, and a late handler is logged rather than failed.
func idleDisruptor(b *testing.B) func() {
	var handled atomic.Int64 // by the last handlers
	var listening sync.WaitGroup
	ds := make([]disruptor.Disruptor, idleRings)
	for i := range ds {
		d, err := disruptor.New(
			disruptor.Options.NewHandlerGroup(idleDisruptorHandler{}),
			disruptor.Options.NewHandlerGroup(idleDisruptorHandler{}),
			disruptor.Options.NewHandlerGroup(idleDisruptorHandler{}),
			disruptor.Options.NewHandlerGroup(idleDisruptorHandler{&handled}), // idleStages groups in sequence
		)
		if err != nil {
			b.Fatal(err)
		}
		hi := d.Reserve(1)
		d.Commit(hi, hi)
		ds[i] = d
	}
	for _, d := range ds {
		listening.Add(1)
		go func() { defer listening.Done(); d.Listen() }()
	}
	for deadline := time.Now().Add(5 * time.Second); handled.Load() < idleRings && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := handled.Load(); n < idleRings {
		b.Logf("after 5 s only %d of %d disruptors had handled their event (starved by the sleep-polling of the others)", n, idleRings)
	}
	return func() {
		for _, d := range ds {
			d.Close()
		}
		listening.Wait()
	}
}

func idleChan(b *testing.B) func() {
	var handled atomic.Int64
	var running sync.WaitGroup
	heads := make([]chan int64, idleRings)
	for i := range heads {
		heads[i] = make(chan int64, 1024)
		in := heads[i]
		for s := range idleStages {
			var out chan int64
			if s < idleStages-1 {
				out = make(chan int64, 1024)
			}
			src, dst := in, out
			running.Add(1)
			go func() {
				defer running.Done()
				for v := range src {
					if dst != nil {
						dst <- v
					} else {
						handled.Add(1)
					}
				}
				if dst != nil {
					close(dst)
				}
			}()
			in = out
		}
		heads[i] <- 1
	}
	waitFor(b, "every channel chain handled its event", func() bool { return handled.Load() == idleRings })
	return func() {
		for _, h := range heads {
			close(h)
		}
		running.Wait()
	}
}
