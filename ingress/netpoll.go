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

	"hongbao/conn"
	"hongbao/event"
	"hongbao/proto"
)

// netEngine is ModeNetpoll: one goroutine per connection on the standard net
// package (Accept, then Read in a loop), with Go's runtime poller underneath.
// It shares the frame handling (proc) with the epoll loops, so the two differ
// only in how bytes arrive: the baseline for comparisons, and the mode of
// systems without epoll.
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
	pre  bool  // not logged in
	kick uint8 // CloseIdle's ERROR code, 0: none
}

// netpollReadMax caps one Read: a goroutine keeps its buffer for the life of
// its connection, so it stays small.
const netpollReadMax = 4096

func newNetpoll(ing *Ingress) (engine, error) {
	e := &netEngine{ing: ing, listening: true, stop: make(chan struct{}), conns: make(map[*iconn]netEntry)}
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
		if (ent.pre || e.ing.o.Bare) && ent.kick == 0 {
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
	e.conns[ic] = netEntry{pre: true}
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

// netConn is one connection's goroutine.
type netConn struct {
	e     *netEngine
	ic    *iconn
	p     proc
	cnt   counters
	sh    *shard
	pre   bool
	start time.Time // accept time, for the login deadline
}

func (e *netEngine) serve(ic *iconn, sh *shard) {
	defer e.wg.Done()
	ing := e.ing
	nc := ic.nc
	ic.c.Accepted = ing.o.Now()
	s := &netConn{e: e, ic: ic, sh: sh, pre: true, start: time.Now()}
	s.p = ing.newProc(&s.cnt, false)
	defer s.cnt.flush(sh)
	nc.SetNoDelay(true)
	rc, err := nc.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) { ic.c.FD = int(fd) })
	}
	s.cnt[cAccepted]++
	if err != nil || e.closing.Load() {
		s.end(nil)
		return
	}
	s.setReadDeadline(s.start.Add(ing.o.LoginTimeout))
	if s.kick() != 0 { // CloseIdle kicked it before this goroutine ran: the deadline above undid the kick's
		s.setReadDeadline(time.Unix(1, 0))
	}
	s.run()
}

// setReadDeadline sets the read deadline unless Close has begun, whose
// deadline in the past must win.
func (s *netConn) setReadDeadline(t time.Time) {
	s.ic.nc.SetReadDeadline(t)
	if s.e.closing.Load() {
		s.ic.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

func (s *netConn) run() {
	e, ic, p := s.e, s.ic, &s.p
	buf := make([]byte, maxPartial+min(e.ing.o.ReadBudget, netpollReadMax))
	size := len(buf) - maxPartial
	k := 0 // bytes of a partial frame at the front of buf
	for {
		n, err := ic.nc.Read(buf[k : k+size])
		s.cnt[cReads]++
		if n > 0 {
			s.cnt[cBytesIn] += uint64(n)
			data := buf[:k+n]
			p.out = p.out[:0]
			used, r := p.consume(ic, data, e.ing.o.Now())
			s.checkLogin()
			for wait := 50 * time.Microsecond; r == resStall; wait = min(2*wait, time.Millisecond) {
				if wait == 50*time.Microsecond {
					s.cnt[cStalls]++
				}
				s.cnt.flush(s.sh)
				if !e.sleep(wait) { // closing
					s.quit()
					return
				}
				if kick := s.kick(); kick != 0 && (s.pre || p.bare) { // CloseIdle does not wait for the ring
					s.end(proto.AppendError(p.out[:0], 0, kick))
					return
				}
				var u int
				u, r = p.consume(ic, data[used:], e.ing.o.Now())
				used += u
				s.checkLogin()
			}
			switch r {
			case resMore:
				k = copy(buf, data[used:])
				if len(p.out) > 0 { // Bare: one write per read, as in epoll mode
					if w, err := unix.Write(ic.c.FD, p.out); err != nil || w < len(p.out) {
						s.end(nil)
						return
					}
				}
			case resFatal:
				s.drain(buf)
				s.disconnect()
				return
			case resClose:
				s.end(p.out)
				return
			}
		}
		s.cnt.flush(s.sh)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if s.deadline() {
				return
			}
			continue
		}
		if s.pre || p.bare { // EOF or error
			s.end(nil)
		} else {
			s.disconnect()
		}
		return
	}
}

// deadline handles a read deadline: Close, CloseIdle or the login timeout.
// It reports whether the connection is done with.
func (s *netConn) deadline() bool {
	e := s.e
	if e.closing.Load() {
		s.quit()
		return true
	}
	kick := s.kick()
	switch {
	case kick != 0 && (s.pre || s.p.bare):
		s.end(proto.AppendError(s.p.out[:0], 0, kick))
		return true
	case s.pre && time.Since(s.start) >= e.ing.o.LoginTimeout:
		s.cnt[cLoginTimeouts]++
		s.end(proto.AppendError(s.p.out[:0], 0, proto.ErrCodeLoginTimeout))
		return true
	case s.pre:
		s.setReadDeadline(s.start.Add(e.ing.o.LoginTimeout))
	default:
		s.setReadDeadline(time.Time{}) // a kick that lost the race with LOGIN
	}
	return false
}

// kick returns the ERROR code CloseIdle asked this connection to close with,
// or 0.
func (s *netConn) kick() uint8 {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.e.conns[s.ic].kick
}

// checkLogin notes at once when consume has published the connection's
// LOGIN: from then on its egress owns it, and no ingress path may close it.
func (s *netConn) checkLogin() {
	if s.pre && s.ic.c.User != 0 {
		s.loggedIn()
	}
}

// loggedIn records that the connection's LOGIN was published.
func (s *netConn) loggedIn() {
	s.pre = false
	e := s.e
	e.mu.Lock()
	ent := e.conns[s.ic]
	if ent.kick != 0 && !s.p.bare {
		e.kicked--
		e.cond.Broadcast()
	}
	ent.pre = false
	e.conns[s.ic] = ent
	e.mu.Unlock()
	s.setReadDeadline(time.Time{})
}

// forget removes the connection from the engine's map before it is released
// or handed to its egress (after which its record may serve another
// connection), and reports whether CloseIdle waits for it.
func (s *netConn) forget() (kicked bool) {
	e := s.e
	e.mu.Lock()
	ent := e.conns[s.ic]
	delete(e.conns, s.ic)
	e.mu.Unlock()
	return ent.kick != 0 && (ent.pre || s.p.bare)
}

// forgetLive is forget for a logged-in connection, which CloseIdle does not
// wait for (but in Bare mode, where the ingress closes it itself).
func (s *netConn) forgetLive() {
	if s.forget() {
		s.e.unkick()
	}
}

// unkick tells CloseIdle that one of its connections is gone.
func (e *netEngine) unkick() {
	e.mu.Lock()
	e.kicked--
	e.cond.Broadcast()
	e.mu.Unlock()
}

// end closes a connection the ingress owns after one best-effort write of out.
func (s *netConn) end(out []byte) {
	if len(out) > 0 {
		unix.Write(s.ic.c.FD, out) // Go made the socket non-blocking
	}
	kicked := s.forget()
	s.cnt[cClosed]++
	s.e.ing.release(s.ic)
	if kicked { // released: CloseIdle may return
		s.e.unkick()
	}
}

// quit leaves at Close: what the ingress owns is closed, a logged-in
// connection gets one attempt at KDisconnect (see Ingress.Close).
func (s *netConn) quit() {
	if s.pre || s.p.bare {
		s.end(nil)
		return
	}
	s.forgetLive()
	if sl, ok := s.e.ing.o.Bus.ClaimAnswer(int(s.ic.c.SET)); ok {
		s.publishDisconnect(sl)
	}
}

// disconnect publishes KDisconnect, waiting for room as long as it takes
// (this goroutine has nothing else to do), and hands the connection to its
// egress.
func (s *netConn) disconnect() {
	s.forgetLive()
	if sl, ok := s.e.claim(int(s.ic.c.SET)); ok {
		s.publishDisconnect(sl)
	}
}

func (s *netConn) publishDisconnect(sl event.Slot) {
	c := &s.ic.c
	s.cnt[cClosed]++
	*sl.Event() = event.Event{Kind: event.KDisconnect, User: c.User, Conn: conn.HandleOf(c)}
	sl.Publish() // the egress owns the connection from here: do not touch it again
}

// drain reads and drops input after KFatal until the peer goes (the egress's
// Shutdown makes Read return EOF) or the engine closes.
func (s *netConn) drain(buf []byte) {
	for {
		n, err := s.ic.nc.Read(buf)
		s.cnt[cReads]++
		s.cnt[cBytesIn] += uint64(max(n, 0))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !s.e.closing.Load() {
				s.setReadDeadline(time.Time{})
				continue
			}
			return
		}
	}
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
