package ring

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// closedBit is set in the claim cursor when the ring closes; the bits below it
// are then the first sequence never to be claimed. Folding the flag into the cursor makes a
// claim and a Close race-free with one CAS: a claim either lands before the
// Close (and is drained) or fails.
const closedBit = int64(1) << 62

// Producers selects the sequencer.
type Producers uint8

const (
	// SingleProducer: all claims and publishes come from one goroutine at a
	// time, in sequence order. Publication is one store of the cursor.
	SingleProducer Producers = iota
	// MultiProducer: any number of goroutines claim and publish concurrently;
	// publication is marked per slot (LMAX's available buffer) so a stage never
	// reads a claimed slot before its producer published it.
	MultiProducer
)

// Options configures a Ring. The zero value of every field but Size is a
// sensible default.
type Options struct {
	Size      int       // number of slots: a power of two ≥ 1
	Producers Producers // SingleProducer (default) or MultiProducer
	Wait      Wait      // WaitPark (default), WaitYield or WaitSpin
	Spins     int       // WaitPark/WaitYield: rounds of spinning before yielding (0: DefaultSpins; negative: none)
	Yields    int       // WaitPark: rounds of yielding before parking (0: DefaultYields; negative: none)
	// Fused runs every stage on one goroutine: each batch goes through the
	// stages in the order they were added, which is a topological order of
	// the graph (an upstream is added before its downstream). Every stage
	// still sees every event in order and after its upstreams, and owns its
	// state alone; what is lost is stages overlapping on several cores, and
	// what is won is one wake-up per batch instead of one per stage — the
	// better trade when there are many more rings than cores.
	Fused bool

	start int64 // first sequence; set only by tests (export_test.go)
}

// Ring is a Disruptor ring of events of type T with its stages.
//
// Build it with New, add stages with AddStage, then Start. Claim/TryClaim,
// At and Publish are safe for concurrent use with MultiProducer; with
// SingleProducer one goroutine at a time may produce. Close may be called from
// any goroutine, any number of times.
type Ring[T any] struct {
	slots []T
	mask  int64
	multi bool
	wait  waiter
	fused bool

	claimed   sequence // next sequence to claim (never negative), | closedBit once closed
	closing   flag     // set once closedBit is: waiting stages poll this, not the producers' hot claimed line
	published sequence // SingleProducer: last published sequence
	gateCache sequence // producers' cached minimum of the leaves' progress

	// available[s&mask] == s once s is published (MultiProducer only).
	available []atomic.Int64

	pubSig signal // first stages park here; Publish wakes them

	// Fused only: the run claim, held by whichever goroutine runs the
	// stages (the ring's own, or a producer in Run), and what only its
	// holder touches.
	running  flag
	cur      *Stage[T] // the stage running, for its panic's StageError
	fusedMax int64     // the smallest MaxBatch of any stage; 0: none

	stages  []*Stage[T]
	leaves  []*Stage[T]
	started bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	failed    atomic.Bool
	errMu     sync.Mutex
	err       error
	done      chan struct{}
}

// rounds reads an Options count: 0 is the default, negative is none.
func rounds(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// New allocates a ring of o.Size slots.
func New[T any](o Options) (*Ring[T], error) {
	if o.Size < 1 || o.Size&(o.Size-1) != 0 {
		return nil, fmt.Errorf("ring: size %d is not a power of two ≥ 1", o.Size)
	}
	if o.Producers > MultiProducer {
		return nil, fmt.Errorf("ring: unknown producers %d", o.Producers)
	}
	if o.Wait > WaitSpin {
		return nil, fmt.Errorf("ring: unknown wait strategy %d", o.Wait)
	}
	o.Spins, o.Yields = rounds(o.Spins, DefaultSpins), rounds(o.Yields, DefaultYields)
	if o.start < 0 || o.start >= closedBit {
		return nil, fmt.Errorf("ring: start sequence %d out of range", o.start)
	}
	r := &Ring[T]{
		slots: make([]T, o.Size),
		mask:  int64(o.Size - 1),
		multi: o.Producers == MultiProducer,
		wait:  waiter{wait: o.Wait, spins: o.Spins, yields: o.Yields},
		fused: o.Fused,
		done:  make(chan struct{}),
	}
	r.claimed.Store(o.start)
	r.published.Store(o.start - 1)
	r.gateCache.Store(o.start - 1)
	if r.multi {
		r.available = make([]atomic.Int64, o.Size)
		for i := range r.available {
			r.available[i].Store(math.MinInt64) // matches no sequence
		}
	}
	r.pubSig.init()
	return r, nil
}

// Size is the number of slots.
func (r *Ring[T]) Size() int { return len(r.slots) }

// At returns the slot of sequence seq. A producer writes only the slots it
// claimed, before publishing them; a stage reads (and may modify) only the
// slots of its current batch.
func (r *Ring[T]) At(seq int64) *T { return &r.slots[seq&r.mask] }

// Claim claims n consecutive slots and returns the highest sequence: the
// claim is [hi-n+1, hi]. It blocks while the ring is full, until every leaf
// stage has finished the events that the claim overwrites. It fails with
// ErrClosed once the ring is closing. Every successful claim must be followed
// by a Publish of the same range, or Close will wait for it forever.
func (r *Ring[T]) Claim(n int) (hi int64, err error) { return r.claim(int64(n), 0, true) }

// TryClaim is Claim that fails at once with ErrFull when there is no room.
func (r *Ring[T]) TryClaim(n int) (hi int64, err error) { return r.claim(int64(n), 0, false) }

// TryClaimLeaving is TryClaim that also fails with ErrFull unless keepFree
// slots stay free after the claim. Producers of low-priority events (new
// requests) use it so that a filling ring keeps room for high-priority ones
// (answers, overload replies).
func (r *Ring[T]) TryClaimLeaving(n, keepFree int) (hi int64, err error) {
	if keepFree < 0 || n+keepFree > len(r.slots) {
		return 0, ErrClaimSize
	}
	return r.claim(int64(n), int64(keepFree), false)
}

func (r *Ring[T]) claim(n, keepFree int64, block bool) (int64, error) {
	if n < 1 || n > int64(len(r.slots)) {
		return 0, ErrClaimSize
	}
	for {
		c := r.claimed.Load()
		if c&closedBit != 0 {
			return 0, ErrClosed
		}
		hi := c + n - 1
		if wrap := hi + keepFree - int64(len(r.slots)); wrap > r.gateCache.Load() {
			gate := r.minLeaf()
			r.gateCache.Store(gate) // racing producers may store an older minimum: only conservative
			if wrap > gate {
				if !block {
					return 0, ErrFull
				}
				r.waitRoom(wrap)
				continue
			}
		}
		if r.claimed.CompareAndSwap(c, hi+1) {
			return hi, nil
		}
	}
}

// waitRoom waits until every leaf has finished sequence wrap, or the ring closes.
func (r *Ring[T]) waitRoom(wrap int64) {
	closed := func() bool { return r.claimed.Load()&closedBit != 0 }
	r.wait.until(func() bool { return r.minLeaf() >= wrap || closed() }, func() {
		for _, l := range r.leaves {
			if l.seq.Load() < wrap {
				l.sig.park(func() bool { return l.seq.Load() >= wrap || closed() })
				return
			}
		}
	})
}

// Publish makes the claimed events [lo, hi] visible to the first stages.
func (r *Ring[T]) Publish(lo, hi int64) {
	r.PublishQuiet(lo, hi) // readable by first stages
	r.pubSig.wake()
}

// PublishQuiet is Publish without waking the first stages: for a producer
// of a fused ring that calls Run after its publishes, which runs them or
// wakes the ring's goroutine.
func (r *Ring[T]) PublishQuiet(lo, hi int64) {
	if r.multi {
		for s := lo; s <= hi; s++ {
			r.available[s&r.mask].Store(s)
		}
	} else {
		r.published.Store(hi)
	}
}

// publishedFrom returns the highest sequence h ≥ next-1 such that every
// sequence in [next, h] is published.
func (r *Ring[T]) publishedFrom(next int64) int64 {
	if !r.multi {
		return r.published.Load()
	}
	last := r.claimed.Load()&^closedBit - 1
	for s := next; s <= last; s++ {
		if r.available[s&r.mask].Load() != s {
			return s - 1
		}
	}
	return last
}

func (r *Ring[T]) minLeaf() int64 {
	m := r.leaves[0].seq.Load()
	for _, l := range r.leaves[1:] {
		m = min(m, l.seq.Load())
	}
	return m
}

// Len is the number of claimed events that some leaf has not yet finished:
// the ring's occupancy, for metrics. Safe for concurrent use.
func (r *Ring[T]) Len() int {
	if !r.started {
		return 0
	}
	return int(r.claimed.Load()&^closedBit - 1 - r.minLeaf())
}

// Start starts one goroutine per stage, or one for them all when fused. The
// graph is fixed from then on.
func (r *Ring[T]) Start() error {
	if r.started {
		return errors.New("ring: already started")
	}
	if len(r.stages) == 0 {
		return errors.New("ring: no stages")
	}
	hasDownstream := make(map[*Stage[T]]bool)
	for _, s := range r.stages {
		for _, u := range s.after {
			hasDownstream[u] = true
		}
	}
	for _, s := range r.stages {
		if !hasDownstream[s] {
			r.leaves = append(r.leaves, s)
		}
	}
	for _, s := range r.stages {
		if s.maxBatch > 0 && (r.fusedMax == 0 || s.maxBatch < r.fusedMax) {
			r.fusedMax = s.maxBatch
		}
	}
	r.started = true
	if r.fused {
		r.wg.Add(1)
		go r.runFused()
	} else {
		r.wg.Add(len(r.stages))
		for _, s := range r.stages {
			go s.run()
		}
	}
	go func() { r.wg.Wait(); close(r.done) }()
	return nil
}

// Close stops new claims, lets every stage finish every event claimed before
// it, waits for the stage goroutines to return and reports the first stage
// failure, if any. Safe to call more than once and from any goroutine.
func (r *Ring[T]) Close() error {
	r.stop()
	if r.started {
		<-r.done
	}
	return r.Err()
}

// Done is closed when every stage goroutine has returned: after Close, or
// after a stage failed.
func (r *Ring[T]) Done() <-chan struct{} { return r.done }

// Err reports the stage failure that stopped the ring, or nil.
func (r *Ring[T]) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

func (r *Ring[T]) stop() {
	r.closeOnce.Do(func() {
		for { // set closedBit: the claimed range is frozen from here on
			c := r.claimed.Load()
			if r.claimed.CompareAndSwap(c, c|closedBit) {
				break
			}
		}
		r.closing.Store(true) // after closedBit: a stage that sees it finds the final range
		if !r.started {
			close(r.done)
		}
		r.wakeAll()
	})
}

// fail stops the ring without draining: a failed stage will never finish the
// events its downstream waits for.
func (r *Ring[T]) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.errMu.Unlock()
	r.failed.Store(true)
	r.stop()
	r.wakeAll()
}

func (r *Ring[T]) wakeAll() {
	r.pubSig.wake()
	for _, s := range r.stages {
		s.sig.wake()
	}
}

// finished reports whether a stage whose next sequence is next must return:
// the ring failed, or it closed and the stage has finished its last claim.
func (r *Ring[T]) finished(next int64) bool {
	if r.failed.Load() {
		return true
	}
	if !r.closing.Load() { // spares the producers' claimed line while the ring runs
		return false
	}
	c := r.claimed.Load()
	return c&closedBit != 0 && next >= c&^closedBit
}

// Fused reports whether the stages run on one goroutine (Options.Fused), so
// that Run can run them on a producer's.
func (r *Ring[T]) Fused() bool { return r.fused }
