// ModeNetpoll, this file and compare_netpoll_conn.go: the comparison path
// (-ingress=netpoll) and the only mode of systems without epoll. Nothing of
// the epoll loops calls into them; New picks one engine or the other, once
// (docs/DESIGN.md, Epoll loops, not a goroutine per connection).

package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
)

// netEngine is ModeNetpoll: one goroutine per connection on the standard net
// package (Accept, then Read in a loop), with Go's runtime poller underneath.
// It shares the frame handling (proc) with the epoll loops, so the two differ
// only in how bytes arrive.
//
// What it costs per connection is a goroutine and its read buffer
// (netpollReadMax plus room for a partial frame), held as long as the
// connection lives, where an idle epoll connection holds neither. Login
// timeouts and the wake-ups of CloseIdle and Close are read deadlines, in
// wall-clock time (Options.Now only stamps events and checks tokens).
type netEngine struct {
	ing  *Ingress
	lns  []*net.TCPListener
	as   []net.Addr
	wg   sync.WaitGroup // accept and connection goroutines
	next atomic.Uint32  // deals connections over the counter shards

	keep      bool // Bare: the ingress keeps logged-in connections (compare_bare.go)
	started   bool // under Ingress.mu
	listening bool
	closing   atomic.Bool
	stop      chan struct{} // closed by close: ends every backoff and retry wait

	mu       sync.Mutex
	cond     sync.Cond           // on mu: a kicked connection left or logged in
	conns    map[*iconn]netEntry // every connection a goroutine serves
	kicked   int                 // CloseIdle's connections not yet gone
	refusing bool                // stopAccepting ran: accepted connections are closed, not registered
}

// netEntry is what other goroutines need to know of a connection.
type netEntry struct {
	own  bool  // the ingress owns it: not logged in, or kept (Bare)
	kick uint8 // CloseIdle's ERROR code, 0: none
}

// netpollReadMax caps one Read: a goroutine keeps its buffer for the life of
// its connection, so it stays small.
const netpollReadMax = 4096

func newNetpoll(ing *Ingress) (engine, error) {
	e := &netEngine{ing: ing, keep: ing.o.Bare, listening: true, stop: make(chan struct{}), conns: make(map[*iconn]netEntry)}
	e.cond.L = &e.mu
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		if !ing.o.ReusePort {
			return nil
		}
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		return errors.Join(err, os.NewSyscallError("setsockopt SO_REUSEPORT", serr))
	}}
	for _, a := range ing.o.Listen {
		ln, err := lc.Listen(context.Background(), "tcp", a)
		if err != nil {
			for _, l := range e.lns {
				l.Close()
			}
			return nil, fmt.Errorf("ingress: cannot listen on %q: %w", a, err)
		}
		e.lns = append(e.lns, ln.(*net.TCPListener))
		e.as = append(e.as, ln.Addr())
	}
	return e, nil
}

func (e *netEngine) addrs() []net.Addr { return append([]net.Addr(nil), e.as...) }

func (e *netEngine) start() {
	e.started = true
	if !e.listening {
		return
	}
	for i, ln := range e.lns {
		e.wg.Add(1)
		go e.accept(ln, &e.ing.shards[i%len(e.ing.shards)])
	}
}

func (e *netEngine) stopAccepting() {
	e.mu.Lock()
	e.refusing = true // from here no connection joins e.conns, so closeIdle sees them all
	e.mu.Unlock()
	if e.listening {
		e.listening = false
		for _, ln := range e.lns {
			ln.Close() // Accept returns net.ErrClosed
		}
	}
}

func (e *netEngine) closeIdle(code uint8) {
	e.mu.Lock()
	defer e.mu.Unlock()
	past := time.Unix(1, 0)
	for ic, ent := range e.conns {
		if ent.own && ent.kick == 0 {
			ent.kick = code
			e.conns[ic] = ent
			e.kicked++
			ic.nc.SetReadDeadline(past) // its goroutine wakes, writes ERROR code and closes
		}
	}
	for e.kicked > 0 && !e.closing.Load() {
		e.cond.Wait()
	}
}

func (e *netEngine) close() error {
	e.closing.Store(true) // before the kicks: a goroutine that resets its deadline checks it after
	close(e.stop)
	e.stopAccepting()
	e.mu.Lock()
	past := time.Unix(1, 0)
	for ic := range e.conns {
		ic.nc.SetDeadline(past) // wakes its reader, and any WatchWritable waiter
	}
	e.cond.Broadcast()
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}

// accept accepts connections from ln until it closes, a goroutine each.
func (e *netEngine) accept(ln *net.TCPListener, sh *shard) {
	defer e.wg.Done()
	var cnt counters
	defer cnt.flush(sh)
	var backoff time.Duration
	for {
		nc, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and kin: wait (10 ms, doubling to 1 s) and try again.
			cnt[cAcceptErrors]++
			cnt.flush(sh)
			backoff = min(max(2*backoff, time.Duration(acceptBackoffMin)), time.Duration(acceptBackoffMax))
			e.ing.o.Logger.Warn("ingress: accept failed; backing off", "err", err, "backoff", backoff)
			if !e.sleep(backoff) {
				return
			}
			continue
		}
		backoff = 0
		if !e.ing.admit() {
			nc.Close()
			cnt[cRefused]++
			cnt.flush(sh)
			continue
		}
		ic := e.register(nc)
		if ic == nil { // accepted as the listeners closed: as if never accepted
			nc.Close()
			e.ing.conns.Add(-1)
			continue
		}
		e.wg.Add(1) // this goroutine is counted, so the count is not zero here
		go e.serve(ic, &e.ing.shards[int(e.next.Add(1))%len(e.ing.shards)])
	}
}

// register records an accepted connection before its goroutine starts, under
// the lock stopAccepting takes, or returns nil once stopAccepting has run. So
// when the shutdown's CloseIdle runs, after StopAccepting, every connection is
// in e.conns: none can log in behind its back (the LOGIN would be published
// after KShutdown and the connection would never get ERROR 8).
func (e *netEngine) register(nc *net.TCPConn) *iconn {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refusing {
		return nil
	}
	ic := e.ing.slab.get()
	ic.nc = nc
	e.conns[ic] = netEntry{own: true}
	return ic
}

// sleep waits d, or reports false at once when the engine closes.
func (e *netEngine) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.stop:
		return false
	case <-t.C:
		return true
	}
}

// unkick tells CloseIdle that one of its connections is gone.
func (e *netEngine) unkick() {
	e.mu.Lock()
	e.kicked--
	e.cond.Broadcast()
	e.mu.Unlock()
}

// claim claims an answer slot in set's ring, waiting while it is full; it
// fails only when the engine closes.
func (e *netEngine) claim(set int) (event.Slot, bool) {
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		if sl, ok := e.ing.o.Bus.ClaimAnswer(set); ok {
			return sl, true
		}
		if !e.sleep(wait) {
			return event.Slot{}, false
		}
	}
}

// watch is Owner.WatchWritable: a goroutine waits on the runtime poller
// until the socket is writable, then publishes KWritable.
func (e *netEngine) watch(ic *iconn) {
	c := &ic.c
	h, user, set := conn.HandleOf(c), c.User, int(c.SET)
	rc, err := ic.nc.SyscallConn()
	if err != nil {
		return
	}
	go func() {
		// The poller's readiness may be stale (the egress writes with its own
		// syscalls), so check for room before believing it.
		if rc.Write(func(fd uintptr) bool { return writable(int(fd)) }) != nil {
			return // closed, or Close's deadline
		}
		if sl, ok := e.claim(set); ok {
			*sl.Event() = event.Event{Kind: event.KWritable, User: user, Conn: h}
			sl.Publish()
		}
	}()
}

// writable reports whether fd has room to write, or an error to find.
func writable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(pfd, 0)
	return err == nil && n > 0 && pfd[0].Revents != 0
}
