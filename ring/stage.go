package ring

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Handler is a stage's logic. Handle is called on the stage's own goroutine
// with each batch of events that are published and finished by every upstream
// stage. The stage may read and modify the batch's slots; when Handle returns
// the batch is finished and downstream stages may see it.
type Handler[T any] interface {
	Handle(b Batch[T])
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc[T any] func(b Batch[T])

// Handle calls f(b).
func (f HandlerFunc[T]) Handle(b Batch[T]) { f(b) }

// Batch is the contiguous range of sequences [Lo, Hi] handed to a stage.
// Hi is where the batch ends: the moment to flush what the batch produced.
type Batch[T any] struct {
	Lo, Hi int64
	slots  []T
	mask   int64
}

// BatchOf returns the batch [lo, hi] over slots indexed by sequence modulo
// len(slots), a power of two, for stages driven by something other than a
// Ring (package transport); it panics unless the batch fits in slots.
func BatchOf[T any](slots []T, lo, hi int64) Batch[T] {
	n := int64(len(slots))
	if n == 0 || n&(n-1) != 0 || hi < lo || hi-lo >= n {
		panic("BUG: ring: BatchOf needs a power-of-two slots holding [lo, hi]")
	}
	return Batch[T]{Lo: lo, Hi: hi, slots: slots, mask: n - 1}
}

// At returns the event of sequence seq, Lo ≤ seq ≤ Hi.
func (b Batch[T]) At(seq int64) *T { return &b.slots[seq&b.mask] }

// Len is the number of events in the batch.
func (b Batch[T]) Len() int { return int(b.Hi - b.Lo + 1) }

// StageOptions configures a stage.
type StageOptions[T any] struct {
	Name     string      // for errors and metrics
	After    []*Stage[T] // upstream stages; none: the stage reads what producers publish
	MaxBatch int         // cap on a batch's length; 0: no cap
}

// Stage is one consumer of a ring: a goroutine that hands batches to its
// Handler in sequence order.
type Stage[T any] struct {
	ring     *Ring[T]
	name     string
	handler  Handler[T]
	after    []*Stage[T]
	maxBatch int64

	seq sequence // last finished sequence: written by the stage, read downstream and by producers
	sig signal   // downstream stages and producers park here; the stage wakes it per batch
}

// AddStage adds a stage running h. Call it before Start; the upstream stages
// must belong to the same ring.
func (r *Ring[T]) AddStage(h Handler[T], o StageOptions[T]) *Stage[T] {
	if r.started {
		panic("BUG: ring: AddStage after Start")
	}
	for _, u := range o.After {
		if u.ring != r {
			panic("BUG: ring: upstream stage " + u.name + " belongs to another ring")
		}
	}
	s := &Stage[T]{
		ring:     r,
		name:     o.Name,
		handler:  h,
		after:    append([]*Stage[T](nil), o.After...),
		maxBatch: int64(o.MaxBatch),
	}
	if s.name == "" {
		s.name = fmt.Sprintf("stage%d", len(r.stages))
	}
	s.seq.Store(r.claimed.Load()&^closedBit - 1)
	s.sig.init()
	r.stages = append(r.stages, s)
	return s
}

// Name is the stage's name.
func (s *Stage[T]) Name() string { return s.name }

// Sequence is the last sequence the stage finished. Safe for concurrent use.
func (s *Stage[T]) Sequence() int64 { return s.seq.Load() }

// upTo returns the highest sequence the stage may handle now (< next when
// there is none).
func (s *Stage[T]) upTo(next int64) int64 {
	if len(s.after) == 0 {
		return s.ring.publishedFrom(next)
	}
	hi := s.after[0].seq.Load()
	for _, u := range s.after[1:] {
		hi = min(hi, u.seq.Load())
	}
	return hi
}

func (s *Stage[T]) run() {
	r := s.ring
	defer r.wg.Done()
	defer func() {
		if v := recover(); v != nil {
			r.fail(&StageError{Stage: s.name, Value: v, Stack: debug.Stack()})
		}
	}()
	next := s.seq.Load() + 1
	for {
		hi := s.upTo(next)
		if hi < next {
			if hi = s.await(next); hi < next {
				return // closed and drained, or failed
			}
		}
		if s.maxBatch > 0 && hi-next >= s.maxBatch {
			hi = next + s.maxBatch - 1
		}
		s.handler.Handle(Batch[T]{Lo: next, Hi: hi, slots: r.slots, mask: r.mask})
		s.seq.Store(hi) // events ≤ hi finished: visible to downstream stages and producers
		s.sig.wake()
		next = hi + 1
	}
}

// runFused is the one goroutine of a fused ring: it waits for published
// events as a first stage does, takes the ring's run claim (Run may hold it
// on a producer's goroutine instead) and hands each batch to every stage in
// turn. The first stage added has no upstream (its upstreams would have had
// to be added before it), so its sequence is the fused ring's progress.
//
// It waits while another goroutine holds the claim: that one re-checks for
// published events after letting go, and runs them or wakes this one.
func (r *Ring[T]) runFused() {
	defer r.wg.Done()
	first := r.stages[0]
	defer func() {
		if v := recover(); v != nil {
			r.fail(&StageError{Stage: r.cur.name, Value: v, Stack: debug.Stack()})
		}
	}()
	ready := func() bool {
		if r.failed.Load() {
			return true
		}
		if r.running.Load() {
			return false
		}
		next := first.seq.Load() + 1
		return r.publishedFrom(next) >= next || r.finished(next)
	}
	park := func() { r.pubSig.park(ready) }
	for {
		r.wait.until(ready, park)
		if r.failed.Load() {
			return
		}
		if !r.running.CompareAndSwap(false, true) {
			continue
		}
		if next := first.seq.Load() + 1; r.finished(next) {
			r.running.Store(false)
			return // closed and drained
		}
		ran := r.runBatches(fusedTurn)
		r.running.Store(false)
		if ran == fusedTurn {
			// More may be waiting: let the producers that run the ring
			// themselves (Run) take it from here rather than keep every
			// event of a busy ring on this goroutine, which waits for a P
			// behind them.
			runtime.Gosched()
		}
	}
}

// fusedTurn is the most events the ring's goroutine runs before it lets go
// of the run claim and yields.
const fusedTurn = 256

// runBatches hands what is published to every stage in turn, batch by
// batch, until nothing more is published or limit events have run (limit <
// 0: no limit), and returns how many ran. Only the holder of the run claim
// calls it.
func (r *Ring[T]) runBatches(limit int64) int64 {
	first := r.stages[0]
	next := first.seq.Load() + 1
	ran := int64(0)
	for limit < 0 || ran < limit {
		if r.failed.Load() {
			break
		}
		hi := r.publishedFrom(next)
		if hi < next {
			break
		}
		if r.fusedMax > 0 && hi-next >= r.fusedMax {
			hi = next + r.fusedMax - 1
		}
		if limit >= 0 {
			hi = min(hi, next+limit-ran-1)
		}
		b := Batch[T]{Lo: next, Hi: hi, slots: r.slots, mask: r.mask}
		for _, s := range r.stages {
			r.cur = s
			s.handler.Handle(b)
			s.seq.Store(hi)
			s.sig.wake() // producers waiting for room park on the leaves' signals
		}
		ran += hi - next + 1
		next = hi + 1
	}
	return ran
}

// Run lets a producer run a fused ring's stages on its own goroutine over
// what is published, at most limit events, instead of waking the ring's
// goroutine: when the ring is idle the events go through every stage with
// no hand-off. Only one goroutine runs the stages at a time (the run
// claim); if another holds it, Run returns at once, and that one sees these
// events when it re-checks after letting go. What Run leaves (past limit,
// or published while it ran) goes to the ring's goroutine, which it wakes.
// A stage that panics fails the ring as on the ring's goroutine; Run then
// returns normally.
//
// Producers that call Run after their publishes may publish with
// PublishQuiet, which wakes nobody. A ring that is not fused, or not
// started, is only woken.
func (r *Ring[T]) Run(limit int) {
	if !r.fused || !r.started || limit < 1 {
		r.pubSig.wake()
		return
	}
	left := int64(limit)
	for !r.failed.Load() && r.running.CompareAndSwap(false, true) {
		left -= r.runGuarded(left)
		r.running.Store(false)
		// Let go, then re-check: a publish that found the claim taken
		// (its Run returned at once) is seen here or by its own wake.
		next := r.stages[0].seq.Load() + 1
		more := r.publishedFrom(next) >= next
		if left <= 0 || r.closing.Load() {
			if more || r.closing.Load() {
				r.pubSig.wake()
			}
			return
		}
		if !more {
			return
		}
	}
}

// runGuarded is runBatches with a stage's panic failing the ring, for Run.
func (r *Ring[T]) runGuarded(limit int64) (ran int64) {
	defer func() {
		if v := recover(); v != nil {
			r.fail(&StageError{Stage: r.cur.name, Value: v, Stack: debug.Stack()})
		}
	}()
	return r.runBatches(limit)
}

// await waits until sequence next can be handled and returns upTo(next), or
// returns next-1 when the stage must stop.
func (s *Stage[T]) await(next int64) int64 {
	r := s.ring
	hi := next - 1
	ready := func() bool {
		hi = s.upTo(next)
		return hi >= next || r.finished(next)
	}
	r.wait.until(ready, func() {
		if len(s.after) == 0 {
			r.pubSig.park(func() bool { return r.publishedFrom(next) >= next || r.finished(next) })
			return
		}
		for _, u := range s.after {
			if u.seq.Load() < next {
				u.sig.park(func() bool { return u.seq.Load() >= next || r.finished(next) })
				return
			}
		}
	})
	if hi < next || r.failed.Load() {
		return next - 1
	}
	return hi
}
