// ModeNetpoll's goroutine per connection: the comparison path and the only
// mode of systems without epoll (see compare_netpoll.go).

package ingress

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// netConn is one connection's goroutine.
type netConn struct {
	e     *netEngine
	ic    *iconn
	p     proc
	cnt   counters
	sh    *shard
	pre   bool      // not logged in: the login deadline runs
	own   bool      // the ingress owns it: pre, or kept (Bare)
	start time.Time // accept time, for the login deadline
}

func (e *netEngine) serve(ic *iconn, sh *shard) {
	defer e.wg.Done()
	ing := e.ing
	nc := ic.nc
	ic.c.Accepted = ing.o.Now()
	s := &netConn{e: e, ic: ic, sh: sh, pre: true, own: true, start: time.Now()}
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
				if kick := s.kick(); kick != 0 && s.own { // CloseIdle does not wait for the ring
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
				if len(p.out) > 0 { // answers the ingress made itself (Bare): one write per read, as in epoll mode
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
		if s.own { // EOF or error
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
	case kick != 0 && s.own:
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

// loggedIn records that the connection's LOGIN went through: published,
// after which its egress owns it, or answered in Bare mode, where the
// ingress keeps it.
func (s *netConn) loggedIn() {
	e := s.e
	s.pre, s.own = false, e.keep
	e.mu.Lock()
	ent := e.conns[s.ic]
	if ent.kick != 0 && !s.own { // CloseIdle waits no more for it
		e.kicked--
		e.cond.Broadcast()
	}
	ent.own = s.own
	e.conns[s.ic] = ent
	e.mu.Unlock()
	if ent.kick != 0 && s.own {
		// Kept (Bare) and kicked: CloseIdle waits for it, so its goroutine
		// must still wake to write the ERROR and close.
		s.setReadDeadline(time.Unix(1, 0))
		return
	}
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
	return ent.kick != 0 && ent.own
}

// forgetLive is forget for a logged-in connection, which CloseIdle does not
// wait for (but in Bare mode, where the ingress closes it itself).
func (s *netConn) forgetLive() {
	if s.forget() {
		s.e.unkick()
	}
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
	if s.own {
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
