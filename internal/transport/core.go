package transport

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/hongbao-io/hongbao/ring"
)

// Options configures a transport.
type Options struct {
	Size   int // slots: events claimed and not yet finished by the last stage; a power of two ≥ 1
	Stages int // the number of stages AddStage will add (go-disruptor fixes its handler groups when built)
}

func (o Options) check() error {
	if o.Size < 1 || o.Size&(o.Size-1) != 0 || o.Size > 1<<30 {
		return fmt.Errorf("transport: size %d is not a power of two in 1..2^30", o.Size)
	}
	if o.Stages < 1 {
		return fmt.Errorf("transport: %d stages; want at least 1", o.Stages)
	}
	return nil
}

// StageOptions configures a stage. Stages run in the order they are added,
// each seeing every event after the one before it.
type StageOptions struct {
	Name     string // for errors
	MaxBatch int    // cap on a batch's length; 0: no cap but the size
}

// cacheLine is the padding unit (as in package ring).
const cacheLine = 128

// closedBit is set in core.state once the transport closes.
const closedBit = int64(1) << 62

// core is what both adapters share: occupancy accounting, the closing and
// draining protocol, and the stage failure.
//
// state counts the events claimed and not yet finished by the last stage,
// with closedBit set once closing. A claim and Close race on it with one CAS:
// a claim either lands before the Close (and is drained) or fails. Close then
// waits for drained, which whoever brings the count to zero after the bit is
// set closes.
type core struct {
	_     [cacheLine]byte
	state atomic.Int64
	_     [cacheLine - 8]byte

	size    int64
	waiters atomic.Int32  // producers blocked in Claim
	room    chan struct{} // cap 1: a token after the last stage finished a batch while a producer waits
	closing chan struct{} // closed with closedBit: wakes blocked producers
	drained chan struct{} // closed once closing and nothing is in flight

	closeOnce sync.Once
	drainOnce sync.Once
	started   bool

	failed atomic.Bool
	errMu  sync.Mutex
	err    error
}

func (c *core) init(size int) {
	c.size = int64(size)
	c.room = make(chan struct{}, 1)
	c.closing = make(chan struct{})
	c.drained = make(chan struct{})
}

// Size is the number of slots.
func (c *core) Size() int { return int(c.size) }

// Len is the number of events claimed and not yet finished by the last stage.
func (c *core) Len() int { return int(c.state.Load() &^ closedBit) }

// Err reports the stage failure that stopped the transport, or nil.
func (c *core) Err() error {
	if !c.failed.Load() {
		return nil
	}
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// tryClaim counts n more events in flight unless fewer than n+keepFree slots
// are free or the transport is closing.
func (c *core) tryClaim(n, keepFree int) error {
	if n < 1 || keepFree < 0 || int64(n)+int64(keepFree) > c.size {
		return ring.ErrClaimSize
	}
	for {
		s := c.state.Load()
		if s&closedBit != 0 {
			return ring.ErrClosed
		}
		if s+int64(n)+int64(keepFree) > c.size {
			return ring.ErrFull
		}
		if c.state.CompareAndSwap(s, s+int64(n)) {
			return nil
		}
	}
}

// claim is tryClaim(n, 0) that waits for room. A waiter registers, then
// re-checks: finish either sees it (and leaves a token in room) or the
// re-check sees the room finish made, so no wake-up is lost.
func (c *core) claim(n int) error {
	err := c.tryClaim(n, 0)
	if !errors.Is(err, ring.ErrFull) {
		return err
	}
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	for {
		err := c.tryClaim(n, 0)
		if !errors.Is(err, ring.ErrFull) {
			if err == nil {
				c.signalRoom() // another waiter may fit in what is left
			}
			return err
		}
		select {
		case <-c.room:
		case <-c.closing:
		}
	}
}

// finish counts n events finished by the last stage.
func (c *core) finish(n int) {
	if c.state.Add(-int64(n)) == closedBit {
		c.drainOnce.Do(func() { close(c.drained) })
	}
	c.signalRoom()
}

func (c *core) signalRoom() {
	if c.waiters.Load() > 0 {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// stop refuses every later claim; drained closes once the events in flight
// have finished.
func (c *core) stop() {
	c.closeOnce.Do(func() {
		if c.state.Or(closedBit)&^closedBit == 0 {
			c.drainOnce.Do(func() { close(c.drained) })
		}
		close(c.closing)
	})
}

// fail records a stage's panic and stops the transport. The stages then skip
// their handlers (the failed one will never finish what its downstream needs)
// but still pass events on, so that Close returns.
func (c *core) fail(stage string, v any) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = &ring.StageError{Stage: stage, Value: v, Stack: debug.Stack()}
	}
	c.errMu.Unlock()
	c.failed.Store(true)
	c.stop()
}

// stage is one stage of a chain: its handler and how it is fed.
type stage[T any] struct {
	name     string
	h        ring.Handler[T]
	maxBatch int64 // ≥ 1
}

func newStage[T any](h ring.Handler[T], o StageOptions, index, size int) *stage[T] {
	if h == nil {
		panic("BUG: transport: nil handler")
	}
	s := &stage[T]{name: o.Name, h: h, maxBatch: int64(o.MaxBatch)}
	if s.name == "" {
		s.name = fmt.Sprintf("stage%d", index)
	}
	if s.maxBatch <= 0 || s.maxBatch > int64(size) {
		s.maxBatch = int64(size)
	}
	return s
}

// handle hands [lo, hi] of slots to the handler in batches of at most
// maxBatch, unless the transport failed; a panic fails it.
func (s *stage[T]) handle(c *core, slots []T, lo, hi int64) {
	if c.failed.Load() {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			c.fail(s.name, v)
		}
	}()
	for lo <= hi {
		end := min(hi, lo+s.maxBatch-1)
		s.h.Handle(ring.BatchOf(slots, lo, end))
		lo = end + 1
	}
}
