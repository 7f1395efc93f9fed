package ring

import (
	"sync"
	"sync/atomic"
)

// cacheLine is the padding unit: 128 bytes because x86's adjacent-line
// prefetcher pulls 64-byte lines in pairs (sync.Pool pads the same way).
const cacheLine = 128

// sequence is a counter written by one side and read by the other, alone on
// its cache lines so that its writes do not invalidate its neighbours'.
type sequence struct {
	_ [cacheLine]byte
	atomic.Int64
	_ [cacheLine - 8]byte
}

// flag is a boolean alone on its cache lines, read often and written rarely.
type flag struct {
	_ [cacheLine]byte
	atomic.Bool
	_ [cacheLine - 4]byte
}

// signal is where goroutines park while they wait for one sequence to move.
// The goroutine that moves the sequence calls wake after its store; wake costs
// one atomic load while nobody is parked.
//
// Protocol (no lost wake-ups): a parker increments waiters, then re-checks its
// condition under mu before cond.Wait. A waker stores the sequence, then loads
// waiters. Go's atomics are sequentially consistent, so either the parker's
// re-check sees the store or the waker sees waiters > 0 and broadcasts under
// mu, which a parker holding mu for its re-check cannot miss.
type signal struct {
	_       [cacheLine]byte
	waiters atomic.Int32
	_       [cacheLine - 4]byte
	mu      sync.Mutex
	cond    sync.Cond
}

func (s *signal) init() { s.cond.L = &s.mu }

// wake wakes every goroutine parked on s. Call it after the store that they
// wait for.
func (s *signal) wake() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	s.cond.Broadcast()
	s.mu.Unlock()
}

// park blocks until moved reports true. moved must read only the sequence
// that this signal's waker stores (and the ring's closed and failed flags,
// whose setters wake every signal).
func (s *signal) park(moved func() bool) {
	s.waiters.Add(1)
	s.mu.Lock()
	for !moved() {
		s.cond.Wait()
	}
	s.mu.Unlock()
	s.waiters.Add(-1)
}
