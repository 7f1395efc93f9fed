package ingress

import (
	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
)

// A loop's connection has these states (flags in iconn.flags):
//
//	pre-login (fPre) ──LOGIN published──▶ live ──EOF──▶ KDisconnect published (egress owns it)
//	     └── any end: ERROR or LOGIN_ACK, then the loop releases it itself
//
// and, while live, may be stalled (fStalled: a full ring refused a frame;
// input paused and its bytes kept in c.In until a retry gets through) or
// fatal (fFatal: KFatal published; input ignored until the peer goes or the
// egress shuts the socket down). A pre-login connection may stall too (its
// KLogin refused). In Bare mode a LOGIN makes the connection kept (fKept)
// instead of live: the loop goes on owning it and releases it itself.

// onConn handles what epoll reported for ic.
func (l *loop) onConn(ic *iconn, events uint32, now int64) {
	if events&unix.EPOLLOUT != 0 {
		l.writable(ic)
	}
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	switch {
	case ic.flags&fFatal != 0: // only RDHUP is asked for, and HUP and ERR cannot be masked
		if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			l.eof(ic)
		}
		return
	case ic.flags&fStalled != 0:
		// IN and RDHUP are masked (one may still come from a wait that ran
		// before the change): the socket's unread frames must wait for the
		// kept ones. HUP and ERR cannot be masked: the peer is gone (a reset
		// or both directions shut), but what it sent before is still
		// readable, so it is read after the kept frames (settle).
		if events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			ic.flags |= fUnread
			l.eof(ic)
		}
		return
	}
	l.read(ic, now) // HUP and RDHUP too: read what is left first, then see EOF
}

// read makes one read and handles what came, or the end of the input.
func (l *loop) read(ic *iconn, now int64) {
	switch data, end, wait := l.fill(ic); {
	case end:
		l.eof(ic)
	case data != nil:
		l.inputRead(ic, data, wait, now)
	}
}

// inputRead handles what a read brought, whose newest byte waited wait ns
// (0: not measured): the shedder decides from it whether the read's SHAKEs
// and CHATs are refused.
func (l *loop) inputRead(ic *iconn, data []byte, wait, now int64) {
	l.p.shed = l.shed.sample(wait)
	l.input(ic, data, now)
	l.p.shed = false
}

// fill makes one read of at most budget bytes into the loop's buffer, behind
// the partial frame ic kept, and returns them all; nil when there was nothing
// to read, and end at the end of the input (EOF or an error). wait is how
// long the newest byte read sat in the socket, when this round measures it
// (else 0).
func (l *loop) fill(ic *iconn) (data []byte, end bool, wait int64) {
	c := &ic.c
	k := 0
	if c.In != nil {
		k = copy(l.buf, c.In.B)
	}
	var n int
	var err error
	if l.stamp {
		var ts int64
		n, ts, err = l.sr.read(c.FD, l.buf[k:k+l.budget])
		l.cnt[cStamped]++
		if ts != 0 {
			wait = l.ing.o.Now() - ts
		}
	} else {
		n, err = unix.Read(c.FD, l.buf[k:k+l.budget])
	}
	l.cnt[cReads]++
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return nil, false, 0
	case err != nil || n == 0:
		return nil, true, 0
	}
	l.cnt[cBytesIn] += uint64(n)
	return l.buf[:k+n], false, wait
}

// input handles data: ic's kept bytes and what was just read (or, on a retry,
// ic.c.In itself). It reports whether ic is gone (released by the loop).
func (l *loop) input(ic *iconn, data []byte, now int64) (gone bool) {
	p := &l.p
	p.out = p.out[:0]
	used, r := p.consume(ic, data, now)
	if ic.flags&fPre != 0 && ic.c.User != 0 { // this input logged it in
		l.loggedIn(l, ic)
	}
	switch r {
	case resMore:
		l.keep(ic, data[used:])
		if ic.flags&fStalled != 0 {
			ic.flags &^= fStalled
			if ic.flags&fEOF == 0 {
				l.e.interest(ic, 0, evPaused)
			}
		}
		if len(p.out) > 0 { // answers the ingress made itself (Bare): all of this read's in one write
			if n, err := unix.Write(ic.c.FD, p.out); err != nil || n < len(p.out) {
				l.end(ic, nil) // no output queue (compare_bare.go)
				return true
			}
		}
	case resStall:
		l.keep(ic, data[used:])
		if ic.flags&fStalled == 0 {
			ic.flags |= fStalled
			l.cnt[cStalls]++
			if ic.flags&fEOF == 0 {
				l.e.interest(ic, evPaused, 0) // else level-triggered epoll would report it every round
			}
			l.queue(ic)
		}
	case resFatal:
		l.keep(ic, nil)
		ic.flags = ic.flags&^fStalled | fFatal
		if ic.flags&fEOF == 0 {
			l.e.interest(ic, evDeaf, evPaused) // until the peer goes or the egress's Shutdown shows as HUP
		}
	case resClose:
		l.end(ic, p.out)
		return true
	}
	return false
}

// keep makes rest (a partial frame, or frames to retry) ic's kept input,
// borrowing a pooled buffer only while there is something to keep. rest may
// alias ic.c.In.
func (l *loop) keep(ic *iconn, rest []byte) {
	c := &ic.c
	if len(rest) == 0 {
		if c.In != nil {
			bytebufferpool.Put(c.In)
			c.In = nil
		}
		return
	}
	if c.In == nil {
		c.In = bytebufferpool.Get()
	}
	c.In.B = append(c.In.B[:0], rest...)
}

// handOver is loggedIn when the LOGIN was published: the SET's egress is
// from now on the connection's writer and releaser.
func (l *loop) handOver(ic *iconn) {
	l.slab.remove(&l.pre, ic)
	l.slab.pushBack(&l.live, ic)
	ic.flags &^= fPre
}

// keepBare is loggedIn in Bare mode: the ingress answered the LOGIN and
// keeps the connection.
func (l *loop) keepBare(ic *iconn) {
	l.slab.remove(&l.pre, ic)
	l.slab.pushBack(&l.kept, ic)
	ic.flags = ic.flags&^fPre | fKept
}

// end closes a connection the loop owns (fOwned) after one best-effort,
// non-blocking write of out.
func (l *loop) end(ic *iconn, out []byte) {
	if len(out) > 0 {
		unix.Write(ic.c.FD, out)
	}
	// Out of epoll before the close: a close only unregisters a socket when no
	// other process (a fork that has not exec'd yet) holds it, and an event
	// for a released id would name whichever connection gets it next.
	l.e.detach(ic)
	if ic.flags&fPre != 0 {
		l.slab.remove(&l.pre, ic)
	} else {
		l.slab.remove(&l.kept, ic)
	}
	l.keep(ic, nil)
	l.cnt[cClosed]++
	l.ing.release(ic)
}

// eof handles the end of ic's input: EOF, a read error, HUP or ERR.
func (l *loop) eof(ic *iconn) {
	if ic.flags&fOwned != 0 {
		l.end(ic, nil)
		return
	}
	l.e.detach(ic)
	ic.flags |= fEOF
	if ic.flags&(fStalled|fQueued) == 0 && l.disconnect(ic) {
		return
	}
	l.queue(ic) // kept frames, or a KWritable, go first
}

// disconnect publishes ic's KDisconnect, handing ic to its egress, or
// reports false when the ring is full.
func (l *loop) disconnect(ic *iconn) bool {
	c := &ic.c
	s, ok := l.ing.o.Bus.ClaimAnswer(int(c.SET))
	if !ok {
		return false
	}
	l.keep(ic, nil)
	l.slab.remove(&l.live, ic)
	ic.flags = 0
	l.cnt[cClosed]++
	*s.Event() = event.Event{Kind: event.KDisconnect, User: c.User, Conn: conn.HandleOf(c)}
	s.Publish() // from here ic is its egress's, which releases it: do not touch it again
	return true
}

// writable handles EPOLLOUT: the socket the egress watches has room again.
func (l *loop) writable(ic *iconn) {
	if l.e.interest(ic, 0, evWantOut)&evWantOut == 0 {
		return // not watched (a report from before the change)
	}
	if ic.flags&fQueued == 0 && l.publishWritable(ic) {
		return
	}
	ic.flags |= fWritable
	l.queue(ic)
}

func (l *loop) publishWritable(ic *iconn) bool {
	c := &ic.c
	s, ok := l.ing.o.Bus.ClaimAnswer(int(c.SET))
	if !ok {
		return false
	}
	*s.Event() = event.Event{Kind: event.KWritable, User: c.User, Conn: conn.HandleOf(c)}
	s.Publish()
	return true
}

func (l *loop) queue(ic *iconn) {
	if ic.flags&fQueued == 0 {
		ic.flags |= fQueued
		l.pending = append(l.pending, pendEntry{ic.id, ic.c.Gen()})
	}
}

// retry gives every queued connection another try at the rings.
func (l *loop) retry(now int64) {
	keep := l.pending[:0]
	for _, pe := range l.pending {
		ic := l.slab.at(pe.id)
		if ic.c.Gen() != pe.gen {
			continue // the loop released it meanwhile
		}
		if l.settle(ic, now) {
			keep = append(keep, pe)
		}
	}
	clear(l.pending[len(keep):])
	l.pending = keep
}

// settle retries, in order, the kept frames, the KWritable and the
// KDisconnect of ic, and reports whether something still waits. When it
// reports false ic is no longer queued and may belong to its egress.
func (l *loop) settle(ic *iconn, now int64) bool {
	if ic.flags&fStalled != 0 {
		if l.input(ic, ic.c.In.B, now) {
			return false
		}
	}
	if ic.flags&fWritable != 0 && l.publishWritable(ic) {
		ic.flags &^= fWritable
	}
	if ic.flags&(fStalled|fWritable) != 0 {
		return true
	}
	if ic.flags&fUnread != 0 {
		l.drain(ic, now)
		return true // again next round: what it read may stall, and more may be left
	}
	if ic.flags&fEOF != 0 {
		return !l.disconnect(ic)
	}
	ic.flags &^= fQueued
	return false
}

// drain makes one read of what a connection that left epoll (fUnread)
// still holds, and handles it; at the end of its input it clears fUnread.
// The peer is gone, so the socket has only what it sent before: a read
// returns data, then 0 or an error (EAGAIN too would mean nothing is left).
func (l *loop) drain(ic *iconn, now int64) {
	if ic.flags&fFatal != 0 { // its input is ignored from here
		ic.flags &^= fUnread
		return
	}
	data, end, wait := l.fill(ic)
	if data == nil || end {
		ic.flags &^= fUnread
		return
	}
	l.inputRead(ic, data, wait, now)
}
