package transport_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/internal/transport"
	"github.com/hongbao-io/hongbao/ring"
)

// event is what the tests push through a chain. Stage i sets marks[i] to the
// event's id, so a later stage sees whether the earlier ones handled it (and,
// for the channel transport, that their changes travelled with it).
type event struct {
	producer int
	n        int64 // the producer's own counter: per-producer order
	marks    [3]int64
}

// chain is a transport under test, with the ring for reference.
type chain interface {
	Size() int
	Claim(n int) (int64, error)
	TryClaim(n int) (int64, error)
	TryClaimLeaving(n, keepFree int) (int64, error)
	At(seq int64) *event
	Publish(lo, hi int64)
	Start() error
	Close() error
	Err() error
	Len() int
}

// impls builds each transport with the given stages, in order.
var impls = []struct {
	name string
	new  func(t testing.TB, size int, hs []ring.Handler[event], maxBatch []int) chain
}{
	{"disruptor", func(t testing.TB, size int, hs []ring.Handler[event], maxBatch []int) chain {
		d, err := transport.NewDisruptor[event](transport.Options{Size: size, Stages: len(hs)})
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range hs {
			d.AddStage(h, transport.StageOptions{Name: fmt.Sprintf("s%d", i), MaxBatch: maxBatch[i]})
		}
		return d
	}},
	{"chan", func(t testing.TB, size int, hs []ring.Handler[event], maxBatch []int) chain {
		c, err := transport.NewChan[event](transport.Options{Size: size, Stages: len(hs)})
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range hs {
			c.AddStage(h, transport.StageOptions{Name: fmt.Sprintf("s%d", i), MaxBatch: maxBatch[i]})
		}
		return c
	}},
	{"ring", func(t testing.TB, size int, hs []ring.Handler[event], maxBatch []int) chain {
		r, err := ring.New[event](ring.Options{Size: size, Producers: ring.MultiProducer})
		if err != nil {
			t.Fatal(err)
		}
		var prev []*ring.Stage[event]
		for i, h := range hs {
			prev = []*ring.Stage[event]{r.AddStage(h, ring.StageOptions[event]{Name: fmt.Sprintf("s%d", i),
				After: prev, MaxBatch: maxBatch[i]})}
		}
		return r
	}},
}

// checker is stage idx of a chain: it checks that it sees every producer's
// events exactly once and in order, after every earlier stage, in batches
// no longer than maxBatch.
type checker struct {
	t        *testing.T
	idx      int
	maxBatch int
	next     map[int]int64 // per producer: the n expected next
	seen     atomic.Int64
	failed   atomic.Bool
}

func (c *checker) fail(format string, args ...any) {
	if c.failed.CompareAndSwap(false, true) {
		c.t.Errorf("stage %d: "+format, append([]any{c.idx}, args...)...)
	}
}

func (c *checker) Handle(b ring.Batch[event]) {
	if b.Len() < 1 || (c.maxBatch > 0 && b.Len() > c.maxBatch) {
		c.fail("batch [%d, %d] of %d events; want 1..%d", b.Lo, b.Hi, b.Len(), c.maxBatch)
	}
	for s := b.Lo; s <= b.Hi; s++ {
		ev := b.At(s)
		id := int64(ev.producer)<<32 | ev.n
		for u := range c.idx {
			if ev.marks[u] != id {
				c.fail("producer %d event %d: stage %d's mark %#x; want %#x", ev.producer, ev.n, u, ev.marks[u], id)
			}
		}
		if want := c.next[ev.producer]; ev.n != want {
			c.fail("producer %d: event %d; want %d (lost, duplicated or reordered)", ev.producer, ev.n, want)
		}
		c.next[ev.producer] = ev.n + 1
		ev.marks[c.idx] = id
	}
	c.seen.Add(int64(b.Len()))
}

// TestChainExactlyOnceInOrder: N producers publish M events each through a
// 3-stage chain (half of them with blocking claims, half retrying TryClaim),
// then Close at once: Close must drain everything, and every stage must see
// every event exactly once, in per-producer order, after the stages before
// it. The last stage's batches are capped at 3.
func TestChainExactlyOnceInOrder(t *testing.T) {
	const producers = 4
	m := int64(5000)
	if raceEnabled {
		m = 1000
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			var cs []*checker
			var hs []ring.Handler[event]
			maxBatch := []int{0, 0, 3}
			for i := range 3 {
				c := &checker{t: t, idx: i, maxBatch: maxBatch[i], next: map[int]int64{}}
				cs, hs = append(cs, c), append(hs, c)
			}
			ch := impl.new(t, 64, hs, maxBatch)
			if err := ch.Start(); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for p := range producers {
				wg.Go(func() {
					for n := int64(0); n < m; n++ {
						var seq int64
						var err error
						if p%2 == 0 {
							seq, err = ch.Claim(1)
						} else {
							for seq, err = ch.TryClaim(1); errors.Is(err, ring.ErrFull); seq, err = ch.TryClaim(1) {
								runtime.Gosched()
							}
						}
						if err != nil {
							t.Errorf("producer %d: claim: %v", p, err)
							return
						}
						*ch.At(seq) = event{producer: p, n: n}
						ch.Publish(seq, seq)
					}
				})
			}
			wg.Wait()
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if got := c.seen.Load(); got != producers*m {
					t.Errorf("stage %d saw %d events; want %d", c.idx, got, producers*m)
				}
				for p := range producers {
					if c.next[p] != m {
						t.Errorf("stage %d: producer %d's last event %d; want %d", c.idx, p, c.next[p]-1, m-1)
					}
				}
			}
			if ch.Len() != 0 {
				t.Errorf("Len %d after Close; want 0", ch.Len())
			}
			if _, err := ch.TryClaim(1); !errors.Is(err, ring.ErrClosed) {
				t.Errorf("TryClaim after Close: %v; want ring.ErrClosed", err)
			}
			if _, err := ch.Claim(1); !errors.Is(err, ring.ErrClosed) {
				t.Errorf("Claim after Close: %v; want ring.ErrClosed", err)
			}
		})
	}
}

// gated is a stage that holds its batch until the gate opens.
type gated struct {
	gate    chan struct{}
	entered chan struct{} // a token per batch entered
	seen    atomic.Int64
}

func newGated() *gated { return &gated{gate: make(chan struct{}), entered: make(chan struct{}, 1024)} }

func (g *gated) Handle(b ring.Batch[event]) {
	g.entered <- struct{}{}
	<-g.gate
	g.seen.Add(int64(b.Len()))
}

func publishOne(t *testing.T, ch chain, claim func() (int64, error)) error {
	t.Helper()
	seq, err := claim()
	if err == nil {
		*ch.At(seq) = event{}
		ch.Publish(seq, seq)
	}
	return err
}

// TestHeadroom: with the stages stuck, TryClaimLeaving(1, 4) is refused once
// fewer than 4 slots would stay free, TryClaim once all 16 are taken, and a
// blocking Claim waits; all of it flows again once the stages move.
func TestHeadroom(t *testing.T) {
	const size, headroom = 16, 4
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			g := newGated()
			nop := ring.HandlerFunc[event](func(ring.Batch[event]) {})
			ch := impl.new(t, size, []ring.Handler[event]{g, nop}, []int{0, 0})
			if err := ch.Start(); err != nil {
				t.Fatal(err)
			}
			request := func() error {
				return publishOne(t, ch, func() (int64, error) { return ch.TryClaimLeaving(1, headroom) })
			}
			answer := func() error { return publishOne(t, ch, func() (int64, error) { return ch.TryClaim(1) }) }
			for i := range size - headroom {
				if err := request(); err != nil {
					t.Fatalf("request %d: %v; want room (%d of %d slots used)", i, err, i, size)
				}
			}
			if err := request(); !errors.Is(err, ring.ErrFull) {
				t.Fatalf("request with %d of %d slots used: %v; want ring.ErrFull", size-headroom, size, err)
			}
			for i := range headroom {
				if err := answer(); err != nil {
					t.Fatalf("answer %d into the headroom: %v", i, err)
				}
			}
			if err := answer(); !errors.Is(err, ring.ErrFull) {
				t.Fatalf("answer into a full transport: %v; want ring.ErrFull", err)
			}
			if _, err := ch.TryClaimLeaving(1, size); !errors.Is(err, ring.ErrClaimSize) {
				t.Errorf("TryClaimLeaving(1, size): %v; want ring.ErrClaimSize", err)
			}
			if ch.Len() != size {
				t.Errorf("Len %d; want %d", ch.Len(), size)
			}
			blocked := make(chan error, 1)
			go func() { blocked <- publishOne(t, ch, func() (int64, error) { return ch.Claim(1) }) }()
			select {
			case err := <-blocked:
				t.Fatalf("Claim on a full transport returned %v; want it to wait", err)
			case <-time.After(20 * time.Millisecond):
			}
			close(g.gate)
			select {
			case err := <-blocked:
				if err != nil {
					t.Fatalf("blocked Claim: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Claim still waiting after the stages drained")
			}
			// The stages drain in the background: a request has room once
			// they have finished enough of it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				err := request()
				if err == nil {
					break
				}
				if !errors.Is(err, ring.ErrFull) || time.Now().After(deadline) {
					t.Fatalf("request after the drain: %v", err)
				}
			}
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
			if got := g.seen.Load(); got != size+2 {
				t.Errorf("stage saw %d events; want %d", got, size+2)
			}
		})
	}
}

// TestCloseWaitsForClaimed: Close waits for a claim made before it to be
// published and handled; claims after it fail.
func TestCloseWaitsForClaimed(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			var seen atomic.Int64
			h := ring.HandlerFunc[event](func(b ring.Batch[event]) { seen.Add(int64(b.Len())) })
			ch := impl.new(t, 8, []ring.Handler[event]{h, h}, []int{0, 0})
			if err := ch.Start(); err != nil {
				t.Fatal(err)
			}
			seq, err := ch.TryClaim(1)
			if err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() { closed <- ch.Close() }()
			published := int64(1)
			for { // until Close has begun: claims before it must be published too
				s, err := ch.TryClaim(1)
				if errors.Is(err, ring.ErrClosed) {
					break
				}
				if errors.Is(err, ring.ErrFull) {
					// The held claim stops the stages, so the ring fills
					// if Close has not begun yet: wait for it.
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				*ch.At(s) = event{}
				ch.Publish(s, s)
				published++
				runtime.Gosched()
			}
			select {
			case err := <-closed:
				t.Fatalf("Close returned %v before the claimed event was published", err)
			case <-time.After(20 * time.Millisecond):
			}
			*ch.At(seq) = event{}
			ch.Publish(seq, seq)
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return after the last event was published")
			}
			if seen.Load() != 2*published {
				t.Errorf("the stages saw %d events; want %d each", seen.Load(), published)
			}
		})
	}
}

// TestStagePanic: a panicking handler stops the transport with a
// *ring.StageError naming it, claims fail, and Close returns that error.
func TestStagePanic(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			var after atomic.Int64
			boom := ring.HandlerFunc[event](func(b ring.Batch[event]) {
				for s := b.Lo; s <= b.Hi; s++ {
					if b.At(s).n == 3 {
						panic("boom")
					}
				}
			})
			count := ring.HandlerFunc[event](func(b ring.Batch[event]) { after.Add(int64(b.Len())) })
			ch := impl.new(t, 16, []ring.Handler[event]{boom, count}, []int{0, 0})
			if err := ch.Start(); err != nil {
				t.Fatal(err)
			}
			for n := range int64(8) {
				seq, err := ch.Claim(1)
				if err != nil {
					break // the ring stops claims at once; the adapters too
				}
				*ch.At(seq) = event{n: n}
				ch.Publish(seq, seq)
			}
			deadline := time.Now().Add(10 * time.Second)
			for ch.Err() == nil {
				if time.Now().After(deadline) {
					t.Fatal("no Err after a stage panicked")
				}
				time.Sleep(time.Millisecond)
			}
			var se *ring.StageError
			if err := ch.Err(); !errors.As(err, &se) || se.Stage != "s0" || se.Value != "boom" {
				t.Fatalf("Err: %v; want the StageError of s0 with value boom", err)
			}
			if _, err := ch.TryClaim(1); !errors.Is(err, ring.ErrClosed) {
				t.Errorf("TryClaim after a failure: %v; want ring.ErrClosed", err)
			}
			done := make(chan error, 1)
			go func() { done <- ch.Close() }()
			select {
			case err := <-done:
				if !errors.As(err, &se) {
					t.Errorf("Close: %v; want the StageError", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs after a stage failure")
			}
			if n := after.Load(); n > 3 {
				t.Errorf("the stage after the failed one saw %d events; want at most the 3 before the panic", n)
			}
		})
	}
}

// TestAllocsPerEvent: claim, publish and handling through a 3-stage chain
// allocate nothing in steady state.
func TestAllocsPerEvent(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("instrumentation allocates")
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			var seen atomic.Int64
			h := ring.HandlerFunc[event](func(b ring.Batch[event]) {
				for s := b.Lo; s <= b.Hi; s++ {
					b.At(s).marks[0]++
				}
			})
			last := ring.HandlerFunc[event](func(b ring.Batch[event]) { seen.Add(int64(b.Len())) })
			ch := impl.new(t, 256, []ring.Handler[event]{h, h, last}, []int{0, 0, 16})
			if err := ch.Start(); err != nil {
				t.Fatal(err)
			}
			var n int64
			step := func() {
				seq, err := ch.Claim(1) // waits (parked, not spinning) when full: GOMAXPROCS is 1 here
				if err != nil {
					t.Fatal(err)
				}
				*ch.At(seq) = event{n: n}
				ch.Publish(seq, seq)
				n++
			}
			for range 1000 { // warm up: timers, scheduler structures
				step()
			}
			if allocs := testing.AllocsPerRun(10000, step); allocs != 0 {
				t.Errorf("%v allocations per claim/publish/handle; want 0", allocs)
			}
			if err := ch.Close(); err != nil || seen.Load() != n {
				t.Errorf("Close: %v; the last stage saw %d of %d events", err, seen.Load(), n)
			}
		})
	}
}

// TestOptions: bad options are refused, and Start checks the stage count.
func TestOptions(t *testing.T) {
	for _, o := range []transport.Options{{Size: 0, Stages: 1}, {Size: 24, Stages: 1}, {Size: 16, Stages: 0}} {
		if _, err := transport.NewDisruptor[event](o); err == nil {
			t.Errorf("NewDisruptor(%+v): no error", o)
		}
		if _, err := transport.NewChan[event](o); err == nil {
			t.Errorf("NewChan(%+v): no error", o)
		}
	}
	d, _ := transport.NewDisruptor[event](transport.Options{Size: 16, Stages: 2})
	d.AddStage(ring.HandlerFunc[event](func(ring.Batch[event]) {}), transport.StageOptions{})
	if err := d.Start(); err == nil {
		t.Error("Disruptor.Start with 1 of 2 stages: no error")
	}
	c, _ := transport.NewChan[event](transport.Options{Size: 16, Stages: 2})
	if err := c.Start(); err == nil {
		t.Error("Chan.Start with 0 of 2 stages: no error")
	}
	if _, err := c.TryClaim(2); !errors.Is(err, ring.ErrClaimSize) {
		t.Errorf("Chan.TryClaim(2): %v; want ring.ErrClaimSize (one slot per claim)", err)
	}
}

// TestCloseWithoutStart: a transport never started (the server's New or
// Start failed) closes at once, even with an event published, and refuses
// claims after.
func TestCloseWithoutStart(t *testing.T) {
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			nop := ring.HandlerFunc[event](func(ring.Batch[event]) {})
			ch := impl.new(t, 8, []ring.Handler[event]{nop}, []int{0})
			if err := publishOne(t, ch, func() (int64, error) { return ch.Claim(1) }); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- ch.Close() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close of a transport never started hangs")
			}
			if _, err := ch.TryClaim(1); !errors.Is(err, ring.ErrClosed) {
				t.Errorf("TryClaim after Close: %v; want ring.ErrClosed", err)
			}
		})
	}
}
