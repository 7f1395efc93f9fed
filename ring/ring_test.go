package ring_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/ring"
)

// event is what the tests push through rings. marks[i] is set by stage i to the
// event's sequence, so a stage can check that its upstream stages finished the
// event before it (an overtaking stage would see a stale mark).
type event struct {
	producer int
	n        int64 // the producer's own counter, to check per-producer order
	marks    [4]int64
}

// graphs name the stage graphs under test: stage i runs after graph[i].
var graphs = map[string][][]int{
	"single":  {nil},
	"chain3":  {nil, {0}, {1}},
	"diamond": {nil, {0}, {0}, {1, 2}},
}

// checker is one stage's handler: it asserts sequence order, upstream marks
// and (for first stages) per-producer order, then marks the event.
type checker struct {
	t        *testing.T
	idx      int
	upstream []int
	next     int64         // the sequence the next batch must start at
	perProd  map[int]int64 // first stages: the next n expected per producer
	seen     atomic.Int64  // events handled
	errs     atomic.Int64  // assertion failures (reported once)
	once     sync.Once
}

func (c *checker) fail(format string, args ...any) {
	c.errs.Add(1)
	c.once.Do(func() { c.t.Errorf("stage %d: "+format, append([]any{c.idx}, args...)...) })
}

func (c *checker) Handle(b ring.Batch[event]) {
	if b.Lo != c.next || b.Hi < b.Lo {
		c.fail("batch [%d,%d]; want it to start at %d", b.Lo, b.Hi, c.next)
	}
	for s := b.Lo; s <= b.Hi; s++ {
		ev := b.At(s)
		for _, u := range c.upstream {
			if ev.marks[u] != s {
				c.fail("seq %d: upstream stage %d mark %d; want %d (overtaken)", s, u, ev.marks[u], s)
			}
		}
		if c.perProd != nil {
			if want := c.perProd[ev.producer]; ev.n != want {
				c.fail("seq %d: producer %d event %d; want %d (lost, duplicated or reordered)", s, ev.producer, ev.n, want)
			}
			c.perProd[ev.producer] = ev.n + 1
		}
		ev.marks[c.idx] = s
	}
	c.next = b.Hi + 1
	c.seen.Add(int64(b.Len()))
}

type scenario struct {
	size      int
	producers int
	perProd   int64
	claimN    int
	graph     [][]int
	start     int64
	wait      ring.Wait
	maxBatch  int
	parkNow   bool // no spinning, no yielding: every wait parks, the hardest case for lost wake-ups
	fused     bool
	run       int // fused: producers publish quietly and Run at most this many events themselves (the odd ones of several Publish)
}

func run(t *testing.T, sc scenario) {
	t.Helper()
	prod := ring.SingleProducer
	if sc.producers > 1 {
		prod = ring.MultiProducer
	}
	o := ring.Options{Size: sc.size, Producers: prod, Wait: sc.wait, Fused: sc.fused}
	if sc.parkNow {
		o.Spins, o.Yields = -1, -1
	}
	r, err := ring.NewAt[event](o, sc.start)
	if err != nil {
		t.Fatal(err)
	}
	stages := make([]*ring.Stage[event], len(sc.graph))
	checkers := make([]*checker, len(sc.graph))
	for i, ups := range sc.graph {
		c := &checker{t: t, idx: i, upstream: ups, next: sc.start}
		if len(ups) == 0 {
			c.perProd = map[int]int64{}
		}
		var after []*ring.Stage[event]
		for _, u := range ups {
			after = append(after, stages[u])
		}
		checkers[i] = c
		stages[i] = r.AddStage(c, ring.StageOptions[event]{Name: fmt.Sprint(i), After: after, MaxBatch: sc.maxBatch})
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := 0; p < sc.producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); n < sc.perProd; {
				k := min(int64(sc.claimN), sc.perProd-n)
				hi, err := r.Claim(int(k))
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				lo := hi - k + 1
				for s := lo; s <= hi; s++ {
					*r.At(s) = event{producer: p, n: n, marks: [4]int64{-1, -1, -1, -1}}
					n++
				}
				if sc.run > 0 && (p%2 == 0 || sc.producers == 1) {
					r.PublishQuiet(lo, hi)
					r.Run(sc.run)
				} else {
					r.Publish(lo, hi)
				}
			}
		}()
	}
	closed := make(chan error, 1)
	go func() {
		wg.Wait()
		if sc.run > 0 {
			// Every event must go through without the wake-up Close gives:
			// a publish whose Run found the stages running is never lost.
			last, leaf := sc.start+int64(sc.producers)*sc.perProd-1, stages[len(stages)-1]
			for deadline := time.Now().Add(10 * time.Second); leaf.Sequence() < last && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if leaf.Sequence() < last {
				t.Errorf("before Close the last stage is at %d of %d: events left unrun", leaf.Sequence(), last)
			}
		}
		closed <- r.Close()
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		for i, st := range stages {
			t.Logf("stage %d at sequence %d, saw %d", i, st.Sequence(), checkers[i].seen.Load())
		}
		t.Fatal("producers or Close did not finish in 30 s: lost wake-up or stuck stage")
	}
	total := int64(sc.producers) * sc.perProd
	for i, c := range checkers {
		if got := c.seen.Load(); got != total {
			t.Errorf("stage %d saw %d events; want %d", i, got, total)
		}
		if got, want := stages[i].Sequence(), sc.start+total-1; got != want {
			t.Errorf("stage %d ends at sequence %d; want %d", i, got, want)
		}
	}
}

func TestExactlyOnceInOrder(t *testing.T) {
	for name, g := range graphs {
		for _, producers := range []int{1, 4} {
			for _, claimN := range []int{1, 3, 16} {
				for _, size := range []int{1, 2, 8, 1024} {
					if claimN > size {
						continue
					}
					for _, w := range []ring.Wait{ring.WaitPark, ring.WaitYield} {
						sc := scenario{size: size, producers: producers, perProd: 20000, claimN: claimN, graph: g, wait: w}
						if size <= 8 {
							sc.perProd = 3000 // small rings wrap thousands of times even so
						}
						t.Run(fmt.Sprintf("%s/p%d/claim%d/size%d/%s", name, producers, claimN, size, w), func(t *testing.T) {
							t.Parallel()
							run(t, sc)
						})
					}
				}
			}
		}
	}
}

func TestParkWithoutSpinning(t *testing.T) {
	for name, g := range graphs {
		for _, producers := range []int{1, 4} {
			for _, size := range []int{2, 1024} {
				sc := scenario{size: size, producers: producers, perProd: 5000, claimN: 1, graph: g, parkNow: true}
				t.Run(fmt.Sprintf("%s/p%d/size%d", name, producers, size), func(t *testing.T) {
					t.Parallel()
					run(t, sc)
				})
			}
		}
	}
}

func TestFused(t *testing.T) {
	for name, g := range graphs {
		for _, producers := range []int{1, 4} {
			for _, claimN := range []int{1, 16} {
				for _, size := range []int{16, 1024} {
					sc := scenario{size: size, producers: producers, perProd: 10000, claimN: claimN, graph: g, fused: true, parkNow: claimN == 1}
					t.Run(fmt.Sprintf("%s/p%d/claim%d/size%d", name, producers, claimN, size), func(t *testing.T) {
						t.Parallel()
						run(t, sc)
					})
				}
			}
		}
	}
}

// TestFusedRun races producers running a fused ring's stages on their own
// goroutines (Run) with the ring's goroutine and with one another: every
// stage must still see every event exactly once, in order, after its
// upstreams, and the ring must drain on Close.
func TestFusedRun(t *testing.T) {
	for name, g := range graphs {
		for _, producers := range []int{1, 2, 4} {
			for _, claimN := range []int{1, 7} {
				for _, limit := range []int{1, 5, 1 << 20} {
					for _, size := range []int{8, 1024} {
						sc := scenario{size: size, producers: producers, perProd: 5000, claimN: claimN, graph: g, fused: true, parkNow: claimN == 1, run: limit, maxBatch: 3}
						t.Run(fmt.Sprintf("%s/p%d/claim%d/limit%d/size%d", name, producers, claimN, limit, size), func(t *testing.T) {
							t.Parallel()
							run(t, sc)
						})
					}
				}
			}
		}
	}
}

// TestRunPanicFailsRing: a stage that panics on a producer's goroutine in
// Run fails the ring as it would on the ring's goroutine, and Run returns.
func TestRunPanicFailsRing(t *testing.T) {
	r, _ := ring.New[int](ring.Options{Size: 8, Fused: true})
	r.AddStage(ring.HandlerFunc[int](func(b ring.Batch[int]) { panic("boom") }), ring.StageOptions[int]{Name: "bad"})
	r.Start()
	hi, err := r.TryClaim(1)
	if err != nil {
		t.Fatal(err)
	}
	r.PublishQuiet(hi, hi)
	r.Run(4) // either runs it here and fails, or the ring's goroutine does
	<-r.Done()
	var se *ring.StageError
	if err := r.Close(); !errors.As(err, &se) || se.Stage != "bad" {
		t.Fatalf("Close: %v; want the stage bad's StageError", err)
	}
	if _, err := r.TryClaim(1); !errors.Is(err, ring.ErrClosed) {
		t.Errorf("claim after failure: %v; want ErrClosed", err)
	}
}

func TestStartNearWrapAround(t *testing.T) {
	for _, start := range []int64{7, 1<<20 - 3, 1<<40 - 1, 1<<61 - 5000} {
		for _, producers := range []int{1, 3} {
			t.Run(fmt.Sprintf("start%d/p%d", start, producers), func(t *testing.T) {
				run(t, scenario{size: 8, producers: producers, perProd: 1000, claimN: 3, graph: graphs["diamond"], start: start})
			})
		}
	}
}

func TestMaxBatch(t *testing.T) {
	r, _ := ring.New[int](ring.Options{Size: 64})
	var maxSeen atomic.Int64
	r.AddStage(ring.HandlerFunc[int](func(b ring.Batch[int]) {
		if int64(b.Len()) > maxSeen.Load() {
			maxSeen.Store(int64(b.Len()))
		}
	}), ring.StageOptions[int]{MaxBatch: 5})
	r.Start()
	hi, _ := r.Claim(64)
	r.Publish(hi-63, hi)
	r.Close()
	if got := maxSeen.Load(); got != 5 {
		t.Errorf("largest batch %d; want 5", got)
	}
}

// gate is a handler that blocks until released, to hold a ring full.
type gate struct {
	release chan struct{}
	handled atomic.Int64
}

func (g *gate) Handle(b ring.Batch[int]) {
	<-g.release
	g.handled.Add(int64(b.Len()))
}

func TestFullRing(t *testing.T) {
	defer checkNoLeak(t)()
	r, _ := ring.New[int](ring.Options{Size: 4, Producers: ring.MultiProducer})
	g := &gate{release: make(chan struct{})}
	r.AddStage(g, ring.StageOptions[int]{})
	r.Start()
	hi, err := r.TryClaim(4)
	if err != nil {
		t.Fatal(err)
	}
	r.Publish(hi-3, hi)
	if _, err := r.TryClaim(1); !errors.Is(err, ring.ErrFull) {
		t.Fatalf("TryClaim on a full ring: %v; want ErrFull", err)
	}
	claimed := make(chan int64)
	go func() {
		hi, err := r.Claim(2)
		if err != nil {
			t.Error(err)
		}
		r.Publish(hi-1, hi)
		claimed <- hi
	}()
	select {
	case <-claimed:
		t.Fatal("Claim returned while the ring was full")
	case <-time.After(20 * time.Millisecond):
	}
	close(g.release) // the stage drains; the blocked claim gets room
	select {
	case hi := <-claimed:
		if hi != 5 {
			t.Errorf("blocked claim got %d; want 5", hi)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked Claim did not resume after the stage freed room")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := g.handled.Load(); got != 6 {
		t.Errorf("handled %d events; want 6", got)
	}
	if _, err := r.Claim(1); !errors.Is(err, ring.ErrClosed) {
		t.Errorf("Claim after Close: %v; want ErrClosed", err)
	}
	if _, err := r.TryClaim(1); !errors.Is(err, ring.ErrClosed) {
		t.Errorf("TryClaim after Close: %v; want ErrClosed", err)
	}
	if _, err := r.TryClaimLeaving(1, 4); !errors.Is(err, ring.ErrClaimSize) {
		t.Errorf("TryClaimLeaving(1, 4) on a 4-slot ring: %v; want ErrClaimSize", err)
	}
	if _, err := r.TryClaim(5); !errors.Is(err, ring.ErrClaimSize) {
		t.Errorf("TryClaim(5) on a 4-slot ring: %v; want ErrClaimSize", err)
	}
}

func TestTryClaimLeaving(t *testing.T) {
	r, _ := ring.New[int](ring.Options{Size: 8})
	g := &gate{release: make(chan struct{})}
	r.AddStage(g, ring.StageOptions[int]{})
	r.Start()
	defer func() { close(g.release); r.Close() }()
	claims := 0
	for {
		hi, err := r.TryClaimLeaving(1, 3)
		if err != nil {
			if !errors.Is(err, ring.ErrFull) {
				t.Fatal(err)
			}
			break
		}
		r.Publish(hi, hi)
		claims++
	}
	if claims != 5 {
		t.Errorf("TryClaimLeaving(1, 3) succeeded %d times on an 8-slot ring; want 5", claims)
	}
	for i := 0; i < 3; i++ { // the kept slots are there for TryClaim
		hi, err := r.TryClaim(1)
		if err != nil {
			t.Fatalf("TryClaim into the kept room: %v", err)
		}
		r.Publish(hi, hi)
	}
	if _, err := r.TryClaim(1); !errors.Is(err, ring.ErrFull) {
		t.Errorf("TryClaim on a full ring: %v; want ErrFull", err)
	}
}

func TestCloseDrains(t *testing.T) {
	defer checkNoLeak(t)()
	r, _ := ring.New[int](ring.Options{Size: 1024})
	var sum atomic.Int64
	first := r.AddStage(ring.HandlerFunc[int](func(b ring.Batch[int]) {
		time.Sleep(time.Millisecond) // slow, so Close finds work left
	}), ring.StageOptions[int]{})
	r.AddStage(ring.HandlerFunc[int](func(b ring.Batch[int]) {
		for s := b.Lo; s <= b.Hi; s++ {
			sum.Add(int64(*b.At(s)))
		}
	}), ring.StageOptions[int]{After: []*ring.Stage[int]{first}, MaxBatch: 7})
	r.Start()
	want := int64(0)
	for i := 1; i <= 1000; i++ {
		hi, _ := r.Claim(1)
		*r.At(hi) = i
		r.Publish(hi, hi)
		want += int64(i)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sum.Load(); got != want {
		t.Errorf("after Close the last stage summed %d; want %d", got, want)
	}
}

func TestCloseUnblocksClaim(t *testing.T) {
	defer checkNoLeak(t)()
	r, _ := ring.New[int](ring.Options{Size: 2})
	g := &gate{release: make(chan struct{})}
	r.AddStage(g, ring.StageOptions[int]{})
	r.Start()
	hi, _ := r.Claim(2)
	r.Publish(hi-1, hi)
	errc := make(chan error)
	go func() {
		_, err := r.Claim(1)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	closed := make(chan error)
	go func() { closed <- r.Close() }()
	select {
	case err := <-errc:
		if !errors.Is(err, ring.ErrClosed) {
			t.Errorf("blocked Claim after Close: %v; want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock a blocked Claim")
	}
	close(g.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := g.handled.Load(); got != 2 {
		t.Errorf("handled %d; want the 2 published before Close", got)
	}
}

func TestPanicStopsRing(t *testing.T) {
	defer checkNoLeak(t)()
	r, _ := ring.New[int](ring.Options{Size: 4})
	first := r.AddStage(ring.HandlerFunc[int](func(b ring.Batch[int]) {
		if *b.At(b.Lo) == 3 {
			panic("boom")
		}
	}), ring.StageOptions[int]{Name: "first", MaxBatch: 1})
	r.AddStage(ring.HandlerFunc[int](func(ring.Batch[int]) {}), ring.StageOptions[int]{After: []*ring.Stage[int]{first}})
	r.Start()
	var claimErr error
	for i := 0; i < 100; i++ {
		hi, err := r.Claim(1)
		if err != nil {
			claimErr = err
			break
		}
		*r.At(hi) = i
		r.Publish(hi, hi)
	}
	if !errors.Is(claimErr, ring.ErrClosed) {
		t.Errorf("claims after a panic: %v; want ErrClosed", claimErr)
	}
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("ring did not stop after a stage panicked")
	}
	var se *ring.StageError
	if err := r.Close(); !errors.As(err, &se) || se.Stage != "first" || se.Value != "boom" {
		t.Fatalf("Close: %v; want the StageError of stage first", err)
	}
}

// TestWakeParked publishes single events long after the stages parked: a lost
// wake-up hangs the iteration and fails it by timeout.
func TestWakeParked(t *testing.T) {
	for _, producers := range []ring.Producers{ring.SingleProducer, ring.MultiProducer} {
		t.Run(fmt.Sprint(producers), func(t *testing.T) {
			defer checkNoLeak(t)()
			r, _ := ring.New[int](ring.Options{Size: 8, Producers: producers})
			out := make(chan int, 1)
			a := r.AddStage(ring.HandlerFunc[int](func(ring.Batch[int]) {}), ring.StageOptions[int]{})
			b := r.AddStage(ring.HandlerFunc[int](func(ring.Batch[int]) {}), ring.StageOptions[int]{After: []*ring.Stage[int]{a}})
			r.AddStage(ring.HandlerFunc[int](func(bt ring.Batch[int]) {
				for s := bt.Lo; s <= bt.Hi; s++ {
					out <- *bt.At(s)
				}
			}), ring.StageOptions[int]{After: []*ring.Stage[int]{b}})
			r.Start()
			iters := 2000
			if testing.Short() {
				iters = 300
			}
			for i := 0; i < iters; i++ {
				if i%100 == 0 {
					time.Sleep(200 * time.Microsecond) // let every stage reach its park
				}
				hi, _ := r.Claim(1)
				*r.At(hi) = i
				r.Publish(hi, hi)
				select {
				case got := <-out:
					if got != i {
						t.Fatalf("got event %d; want %d", got, i)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("iteration %d: event not handled: lost wake-up", i)
				}
			}
			r.Close()
		})
	}
}

func TestAllocsPerEvent(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation allocates")
	}
	r := twoStages(t, false, func(ring.Batch[event]) {})
	allocs := testing.AllocsPerRun(10000, func() {
		hi, _ := r.Claim(2)
		r.At(hi).n = hi
		r.Publish(hi-1, hi)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per claim/publish/consume; want 0", allocs)
	}
}

// twoStages starts a 256-slot multi-producer ring of two stages, the first
// running first, and closes it when the test ends.
func twoStages(t *testing.T, fused bool, first func(ring.Batch[event])) *ring.Ring[event] {
	r, _ := ring.New[event](ring.Options{Size: 256, Producers: ring.MultiProducer, Fused: fused})
	a := r.AddStage(ring.HandlerFunc[event](first), ring.StageOptions[event]{})
	r.AddStage(ring.HandlerFunc[event](func(ring.Batch[event]) {}), ring.StageOptions[event]{After: []*ring.Stage[event]{a}})
	r.Start()
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRunAllocs: a producer running a fused ring's stages itself allocates
// nothing per event.
func TestRunAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation allocates")
	}
	var n atomic.Int64
	r := twoStages(t, true, func(b ring.Batch[event]) { n.Add(int64(b.Len())) })
	allocs := testing.AllocsPerRun(10000, func() {
		hi, _ := r.Claim(2)
		r.At(hi).n = hi
		r.PublishQuiet(hi-1, hi)
		r.Run(8)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per claim/publish/run; want 0", allocs)
	}
	if n.Load() == 0 {
		t.Error("no event went through the stages")
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []ring.Options{{Size: 0}, {Size: 3}, {Size: 8, Wait: 9}, {Size: 8, Producers: 7}} {
		if _, err := ring.New[int](o); err == nil {
			t.Errorf("New(%+v) succeeded; want an error", o)
		}
	}
	r, _ := ring.New[int](ring.Options{Size: 8})
	if err := r.Start(); err == nil {
		t.Error("Start with no stages succeeded")
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of an unstarted ring: %v", err)
	}
}

// checkNoLeak returns a function that fails the test if goroutines started
// during it are still running.
func checkNoLeak(t *testing.T) func() {
	before := runtime.NumGoroutine()
	return func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines left behind:\n%s", runtime.NumGoroutine()-before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
