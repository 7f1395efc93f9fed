package transport

import (
	"errors"
	"fmt"
	"math"
	"sync"

	disruptor "github.com/smarty/go-disruptor"

	"github.com/hongbao-io/hongbao/ring"
)

// Disruptor runs a chain of ring.Handler stages on go-disruptor v0.5.0
// (-pipeline=disruptor): a preallocated []T of Size slots indexed by sequence,
// go-disruptor's shared (multi-writer) sequencer, one handler group per stage
// in the order added, and go-disruptor's default wait strategy.
//
// go-disruptor's Reserve cannot fail for room and TryReserve cannot leave
// headroom, and its Close stops a listener at the first moment it finds
// nothing committed, losing what was reserved but not yet committed. So
// claims first pass the core's occupancy accounting (which refuses, or waits,
// and closes race-free), and only then Reserve: the accounting guarantees the
// room, bar the instant between the last stage's Handle returning and
// go-disruptor storing its sequence. Close stops claims, waits until the last
// stage has finished every claimed event, and only then closes the
// listeners and waits for their goroutines.
type Disruptor[T any] struct {
	core
	slots []T
	d     disruptor.Disruptor

	handlers []*disruptorStage[T] // one per handler group, filled by AddStage
	added    int
	done     chan struct{} // closed when Listen has returned
	closeD   sync.Once
}

// disruptorStage is the go-disruptor Handler of one stage.
type disruptorStage[T any] struct {
	t     *Disruptor[T]
	stage *stage[T]
	last  bool
}

// Handle implements disruptor.Handler: the range becomes ring.Batch values.
func (h *disruptorStage[T]) Handle(lo, hi int64) {
	h.stage.handle(&h.t.core, h.t.slots, lo, hi)
	if h.last {
		h.t.finish(int(hi - lo + 1))
	}
}

// NewDisruptor returns a Disruptor of o.Size slots for o.Stages stages.
func NewDisruptor[T any](o Options) (*Disruptor[T], error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	t := &Disruptor[T]{slots: make([]T, o.Size), done: make(chan struct{})}
	t.init(o.Size)
	// Any WriterCount above 1 selects the goroutine-safe shared sequencer.
	opts := options(disruptor.Options.BufferCapacity(uint32(o.Size)), disruptor.Options.WriterCount(math.MaxUint8))
	for i := range o.Stages {
		h := &disruptorStage[T]{t: t, last: i == o.Stages-1}
		t.handlers = append(t.handlers, h)
		opts = append(opts, disruptor.Options.NewHandlerGroup(h))
	}
	d, err := disruptor.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: go-disruptor: %w", err)
	}
	t.d = d
	return t, nil
}

// options collects go-disruptor options, whose type is unexported, in a slice.
func options[O any](o ...O) []O { return o }

// AddStage adds the next stage of the chain. Call it o.Stages times before Start.
func (t *Disruptor[T]) AddStage(h ring.Handler[T], o StageOptions) {
	if t.started || t.added == len(t.handlers) {
		panic("BUG: transport: AddStage after Start or beyond Options.Stages")
	}
	t.handlers[t.added].stage = newStage(h, o, t.added, len(t.slots))
	t.added++
}

// At returns the slot of sequence seq.
func (t *Disruptor[T]) At(seq int64) *T { return &t.slots[seq&int64(len(t.slots)-1)] }

// Claim claims n slots, waiting for room, and returns the highest sequence.
func (t *Disruptor[T]) Claim(n int) (int64, error) { return t.reserve(n, t.claim(n)) }

// TryClaim claims n slots or fails at once with ring.ErrFull.
func (t *Disruptor[T]) TryClaim(n int) (int64, error) { return t.reserve(n, t.tryClaim(n, 0)) }

// TryClaimLeaving is TryClaim that also fails unless keepFree slots stay free.
func (t *Disruptor[T]) TryClaimLeaving(n, keepFree int) (int64, error) {
	return t.reserve(n, t.tryClaim(n, keepFree))
}

func (t *Disruptor[T]) reserve(n int, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return t.d.Reserve(uint32(n)), nil
}

// Publish commits the claimed slots [lo, hi] to the first stage.
func (t *Disruptor[T]) Publish(lo, hi int64) { t.d.Commit(lo, hi) }

// Start starts go-disruptor's listeners: one goroutine per stage.
func (t *Disruptor[T]) Start() error {
	if t.started {
		return errors.New("transport: already started")
	}
	if t.added != len(t.handlers) {
		return fmt.Errorf("transport: %d stages added; Options.Stages is %d", t.added, len(t.handlers))
	}
	t.started = true
	go func() {
		defer close(t.done)
		t.d.Listen()
	}()
	return nil
}

// Close refuses new claims, waits until every claimed event has been
// published and finished by the last stage, then stops the listeners and
// waits for them. It reports the stage failure, if any. Safe to call more
// than once and from any goroutine.
func (t *Disruptor[T]) Close() error {
	t.stop()
	if t.started {
		<-t.drained
		t.closeD.Do(func() { t.d.Close() }) // listeners return once idle: everything is handled
		<-t.done
	}
	return t.Err()
}
