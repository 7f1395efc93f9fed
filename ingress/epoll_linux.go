package ingress

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	epollSupported = true
	defaultMode    = ModeEpoll
)

// epoll_event data: Fd holds the descriptor, Pad a tag. A tag ≥ 0 is a
// connection's slab id; the negative ones name the loop's own descriptors.
const (
	tagWake    = -1 // the loop's eventfd
	tagListen0 = -2 // listener i has tag tagListen0 - i
)

// eventsPerWait is how many ready descriptors one epoll_wait returns at
// most; the rest wait for the next round (level-triggered, nothing is lost).
const eventsPerWait = 512

// epollEngine runs Options.Loops event loops, each a goroutine blocked in its
// own epoll_wait, sharing the listeners (see accept_linux.go).
type epollEngine struct {
	ing   *Ingress
	lns   []listenSocket
	loops []*loop
	wg    sync.WaitGroup // running loops

	// Lifecycle, under Ingress.mu.
	started   bool
	listening bool // the listeners are open

	// Owner calls from egress goroutines (WatchWritable) use a loop's epfd;
	// Close sets gone, then waits for inflight to drain before closing the
	// epfds, so such a call never reaches a descriptor that was closed and
	// perhaps reused.
	gone     atomic.Bool
	inflight atomic.Int64
}

type listenSocket struct {
	fd   int
	addr *net.TCPAddr
}

func newEpoll(ing *Ingress) (_ engine, err error) {
	e := &epollEngine{ing: ing, listening: true}
	defer func() {
		if err != nil {
			e.closeFDs()
		}
	}()
	for _, a := range ing.o.Listen {
		fd, addr, err := listenFD(a, ing.o.ReusePort)
		if err != nil {
			return nil, err
		}
		e.lns = append(e.lns, listenSocket{fd, addr})
	}
	for i := range ing.o.Loops {
		l, err := newLoop(e, i)
		if err != nil {
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	return e, nil
}

func (e *epollEngine) addrs() []net.Addr {
	as := make([]net.Addr, len(e.lns))
	for i, ln := range e.lns {
		as[i] = ln.addr
	}
	return as
}

func (e *epollEngine) start() {
	e.started = true
	for _, l := range e.loops {
		e.wg.Add(1)
		go l.run()
	}
}

func (e *epollEngine) stopAccepting() {
	if !e.listening {
		return
	}
	e.listening = false
	if !e.started {
		for _, l := range e.loops { // not running: closing the listeners takes them out of every epoll
			l.accepting, l.listening = false, false
		}
	} else {
		// Each loop takes the listeners out of its epoll before they close, so
		// no loop calls accept on a descriptor number that may be reused.
		e.each(func(l *loop) { l.stopAccepting() })
	}
	for _, ln := range e.lns {
		unix.Close(ln.fd)
	}
}

func (e *epollEngine) closeIdle(code uint8) {
	e.each(func(l *loop) { l.closeIdle(code) })
}

func (e *epollEngine) close() error {
	e.stopAccepting()
	if e.started {
		e.each(func(l *loop) { l.quit = true })
		e.wg.Wait()
	}
	e.gone.Store(true) // no new Owner call touches an epfd from here
	for e.inflight.Load() != 0 {
		runtime.Gosched()
	}
	e.closeFDs()
	return nil
}

func (e *epollEngine) closeFDs() {
	if e.listening {
		for _, ln := range e.lns {
			unix.Close(ln.fd)
		}
		e.listening = false
	}
	for _, l := range e.loops {
		l.closeFDs()
	}
}

// each runs fn on every loop and waits until all have run it.
func (e *epollEngine) each(fn func(*loop)) {
	var wg sync.WaitGroup
	wg.Add(len(e.loops))
	for _, l := range e.loops {
		l.cmds <- command{fn, &wg}
		l.wake()
	}
	wg.Wait()
}
