package transport

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/hongbao-io/hongbao/ring"
)

// Chan runs a chain of ring.Handler stages on Go channels (-pipeline=chan),
// the classic design: one buffered channel of Size events in front of each
// stage and one goroutine per stage. A stage goroutine receives one event,
// takes up to MaxBatch-1 more that are already there without blocking, copies
// them into its own power-of-two buffer, hands them to its handler as one
// ring.Batch, then sends each on to the next stage's channel.
//
// Producers fill events in place (event.Bus hands out a *T): a claim takes a
// preallocated scratch slot from a free list (a channel of indices), Publish
// copies it into the first channel and gives the slot back. The sequence a
// claim returns is the scratch slot's index, so claims are of one slot only.
//
// The core's occupancy accounting bounds the events in flight (claimed and
// not yet finished by the last stage) by Size, so no channel send ever blocks
// and the free list never runs dry; it also gives TryClaimLeaving its
// headroom. Close stops claims, waits until every claimed event is finished,
// then closes the first channel; each stage closes the next one as it
// returns.
type Chan[T any] struct {
	core
	scratch []T
	free    chan int32 // indices of scratch slots not claimed

	chans  []chan T // chans[k] is in front of stage k
	stages []*chanStage[T]
	want   int
	wg     sync.WaitGroup
	done   chan struct{}
	closeC sync.Once
}

type chanStage[T any] struct {
	*stage[T]
	t       *Chan[T]
	in, out chan T // out is nil for the last stage
	buf     []T    // power of two ≥ maxBatch
}

// NewChan returns a Chan of o.Size slots for o.Stages stages.
func NewChan[T any](o Options) (*Chan[T], error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	t := &Chan[T]{scratch: make([]T, o.Size), free: make(chan int32, o.Size), want: o.Stages,
		done: make(chan struct{})}
	t.init(o.Size)
	for i := range o.Size {
		t.free <- int32(i)
	}
	for range o.Stages {
		t.chans = append(t.chans, make(chan T, o.Size))
	}
	return t, nil
}

// AddStage adds the next stage of the chain. Call it o.Stages times before Start.
func (t *Chan[T]) AddStage(h ring.Handler[T], o StageOptions) {
	k := len(t.stages)
	if t.started || k == t.want {
		panic("BUG: transport: AddStage after Start or beyond Options.Stages")
	}
	s := &chanStage[T]{stage: newStage(h, o, k, len(t.scratch)), t: t, in: t.chans[k]}
	if k+1 < t.want {
		s.out = t.chans[k+1]
	}
	s.buf = make([]T, 1<<bits.Len64(uint64(s.maxBatch-1)))
	t.stages = append(t.stages, s)
}

// At returns the scratch slot of sequence seq, between its claim and Publish.
func (t *Chan[T]) At(seq int64) *T { return &t.scratch[seq] }

// Claim claims one slot (n must be 1), waiting for room.
func (t *Chan[T]) Claim(n int) (int64, error) {
	if n != 1 {
		return 0, ring.ErrClaimSize
	}
	return t.take(t.claim(n))
}

// TryClaim claims one slot (n must be 1) or fails at once with ring.ErrFull.
func (t *Chan[T]) TryClaim(n int) (int64, error) { return t.TryClaimLeaving(n, 0) }

// TryClaimLeaving is TryClaim that also fails unless keepFree slots stay free.
func (t *Chan[T]) TryClaimLeaving(n, keepFree int) (int64, error) {
	if n != 1 {
		return 0, ring.ErrClaimSize
	}
	return t.take(t.tryClaim(n, keepFree))
}

// take takes a scratch slot for a successful claim. It never waits: scratch
// slots held ≤ events in flight ≤ Size.
func (t *Chan[T]) take(err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return int64(<-t.free), nil
}

// Publish sends the filled scratch slots [lo, hi] to the first stage and
// frees them.
func (t *Chan[T]) Publish(lo, hi int64) {
	for s := lo; s <= hi; s++ {
		v := t.scratch[s]
		t.free <- int32(s) // first, so that scratch slots held ≤ events in flight
		t.chans[0] <- v
	}
}

// Start starts one goroutine per stage.
func (t *Chan[T]) Start() error {
	if t.started {
		return errors.New("transport: already started")
	}
	if len(t.stages) != t.want {
		return fmt.Errorf("transport: %d stages added; Options.Stages is %d", len(t.stages), t.want)
	}
	t.started = true
	t.wg.Add(len(t.stages))
	for _, s := range t.stages {
		go s.run()
	}
	go func() { t.wg.Wait(); close(t.done) }()
	return nil
}

// Close refuses new claims, waits until every claimed event has been
// published and finished by the last stage, then closes the channels and
// waits for the stage goroutines. It reports the stage failure, if any. Safe
// to call more than once and from any goroutine.
func (t *Chan[T]) Close() error {
	t.stop()
	if t.started {
		<-t.drained
		t.closeC.Do(func() { close(t.chans[0]) })
		<-t.done
	}
	return t.Err()
}

func (s *chanStage[T]) run() {
	defer s.t.wg.Done()
	if s.out != nil {
		defer close(s.out) // the next stage returns once it has seen everything
	}
	mask := int64(len(s.buf) - 1)
	next := int64(0) // the stage's own sequence: batches are contiguous in buf
	for {
		v, ok := <-s.in
		if !ok {
			return
		}
		s.buf[next&mask] = v
		hi := next
	more:
		for hi-next+1 < s.maxBatch {
			select {
			case v, ok := <-s.in:
				if !ok { // cannot happen: the channel closes only with nothing in flight
					break more
				}
				hi++
				s.buf[hi&mask] = v
			default:
				break more
			}
		}
		s.handle(&s.t.core, s.buf, next, hi)
		if s.out != nil {
			for q := next; q <= hi; q++ {
				s.out <- s.buf[q&mask] // never blocks: events in flight ≤ Size
			}
		} else {
			s.t.finish(int(hi - next + 1))
		}
		next = hi + 1
	}
}
