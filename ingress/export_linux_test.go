package ingress

import "sync"

// StallLoops blocks every epoll loop, as a loop descheduled or busy for long
// would be, and returns once they all are; release lets them go on.
func (ing *Ingress) StallLoops() (release func()) {
	e := ing.eng.(*epollEngine)
	gate, done := make(chan struct{}), make(chan struct{})
	var in sync.WaitGroup
	in.Add(len(e.loops))
	go func() {
		e.each(func(*loop) { in.Done(); <-gate })
		close(done)
	}()
	in.Wait()
	return func() { close(gate); <-done }
}
