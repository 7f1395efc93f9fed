package ingress

import (
	"golang.org/x/sys/unix"
)

// A connection's epoll interest has two writers: its loop (pausing input,
// taking EPOLLOUT back after it fired, removing the connection) and its
// egress (WatchWritable). Each change is a compare-and-swap on iconn.ev
// followed by EPOLL_CTL_MOD with the events the state then asks for. Two
// MODs can still land in the other order than their states; so each writer,
// after its MOD, re-reads the state and MODs again if it moved. The last MOD
// is therefore always made from the last state: whoever changed the state
// last re-checks after every earlier MOD. The version in the high bits makes
// any change visible, even one that comes back to the same flags.
//
// Rejected: a mutex per connection held across epoll_ctl (a lock across a
// syscall, on the egress's path), and EPOLLONESHOT re-arming (a syscall per
// read round on every busy connection).
const (
	evWantOut = 1 << iota // the egress waits for EPOLLOUT (WatchWritable)
	evPaused              // stalled: no input, not even the peer's FIN, until the kept frames are in
	evDeaf                // after KFatal: input ignored, only the peer's going (RDHUP) matters
	evGone                // out of epoll: no more MODs
	evFlags   = evWantOut | evPaused | evDeaf | evGone
	evVersion = evGone << 1 // added on every change
)

// eventsOf is the epoll interest of state s. Level-triggered throughout: a
// connection left readable after its budget is reported again next round.
// HUP and ERR are always reported.
func eventsOf(s uint32) uint32 {
	var e uint32
	switch {
	case s&evPaused != 0:
	case s&evDeaf != 0:
		e = unix.EPOLLRDHUP
	default:
		e = unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if s&evWantOut != 0 {
		e |= unix.EPOLLOUT
	}
	return e
}

// interest sets and clears flags of ic's interest and brings epoll in line.
// It returns the state before the change. Safe for concurrent use by ic's
// loop and ic's egress.
func (e *epollEngine) interest(ic *iconn, set, clear uint32) (old uint32) {
	for {
		old = ic.ev.Load()
		s := (old | set) &^ clear
		if old&evGone != 0 || s == old {
			return old
		}
		if ic.ev.CompareAndSwap(old, s+evVersion) {
			break
		}
	}
	epfd := e.loops[ic.loop].epfd
	for {
		s := ic.ev.Load()
		if s&evGone != 0 {
			return old
		}
		ev := unix.EpollEvent{Events: eventsOf(s), Fd: int32(ic.c.FD), Pad: int32(ic.id)}
		if unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, ic.c.FD, &ev) != nil {
			return old // ENOENT: its loop removed it meanwhile
		}
		if ic.ev.Load() == s {
			return old
		}
	}
}

// detach takes ic out of its loop's epoll for good. Called by the loop.
func (e *epollEngine) detach(ic *iconn) {
	for {
		old := ic.ev.Load()
		if old&evGone != 0 || ic.ev.CompareAndSwap(old, (old|evGone)+evVersion) {
			break
		}
	}
	unix.EpollCtl(e.loops[ic.loop].epfd, unix.EPOLL_CTL_DEL, ic.c.FD, nil)
}

// watch is Owner.WatchWritable: EPOLLOUT joins ic's interest; when it fires
// the loop takes it out again and publishes KWritable. Called by ic's egress.
func (e *epollEngine) watch(ic *iconn) {
	e.inflight.Add(1)
	defer e.inflight.Add(-1)
	if e.gone.Load() { // Close has begun: nobody would report it
		return
	}
	e.interest(ic, evWantOut, 0)
}

// arm resets a new connection's interest (keeping the version) and adds it to
// its loop's epoll. Nobody else knows the connection yet.
func (l *loop) arm(ic *iconn) error {
	s := ic.ev.Load()&^evFlags + evVersion
	ic.ev.Store(s)
	ev := unix.EpollEvent{Events: eventsOf(s), Fd: int32(ic.c.FD), Pad: int32(ic.id)}
	return unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, ic.c.FD, &ev)
}
