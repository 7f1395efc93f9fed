package ingress

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Accepting. Every loop has every listener in its epoll with EPOLLEXCLUSIVE:
// a new connection wakes one loop waiting in epoll_wait (not all of them),
// and that loop accepts it and keeps it. A busy loop is not waiting, so new
// connections go to the idle ones: the spread follows load, with no hand-off
// between goroutines and no socket per loop.
//
// Rejected: one SO_REUSEPORT listener per loop (the kernel hashes each
// connection to a loop whatever that loop's load; a loop that falls behind
// still gets its share. It also needs SO_REUSEPORT even when the operator did
// not ask to share the port, and :0 needs a second bind per loop), and one
// acceptor goroutine dealing connections out (a hand-off and an eventfd
// write per connection, and one goroutine's accept rate as the ceiling of a
// million-connection ramp).

const (
	// acceptBudget is how many connections a loop accepts from one listener
	// per round, so a connection storm does not starve reading. What is left
	// stays ready (level-triggered) for the next round, of this loop or another.
	acceptBudget = 64
)

// accept accepts up to acceptBudget connections from listener i.
func (l *loop) accept(i int) {
	// The login timeout runs from here, not from the round's clock: read
	// before the round's reads, it can be a long round old under load
	// (docs/DESIGN.md, The login timeout runs from the accept).
	now := l.ing.o.Now()
	lfd := l.e.lns[i].fd
	for range acceptBudget {
		// accept4 with no address: x/sys's Accept4 allocates a Sockaddr per call.
		r, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		if errno != 0 {
			switch errno {
			case unix.EAGAIN:
				return
			case unix.EINTR, unix.ECONNABORTED,
				// Network errors pending on the new socket, which accept(2) says to
				// treat like EAGAIN and retry.
				unix.ENETDOWN, unix.EPROTO, unix.ENOPROTOOPT, unix.EHOSTDOWN, unix.ENONET,
				unix.EHOSTUNREACH, unix.EOPNOTSUPP, unix.ENETUNREACH:
				continue
			}
			// EMFILE, ENFILE, ENOBUFS, ENOMEM: out of descriptors or memory. The
			// listener stays readable, so keep it out of this loop's epoll for a
			// while instead of spinning on it; reading goes on meanwhile.
			l.cnt[cAcceptErrors]++
			l.ing.o.Logger.Warn("ingress: accept failed; backing off", "loop", l.idx,
				"err", os.NewSyscallError("accept4", errno), "backoff", time.Duration(max(2*l.accBackoff, acceptBackoffMin)))
			l.pauseAccept(now)
			return
		}
		l.accBackoff = 0
		fd := int(r)
		if !l.ing.admit() {
			unix.Close(fd) // MaxConns open: the refused peer sees the close at once
			l.cnt[cRefused]++
			continue
		}
		l.add(fd, now)
	}
}

// add makes fd a connection of this loop.
func (l *loop) add(fd int, now int64) {
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // answers are small and latency-bound
	l.shed.watch(fd)
	ic := l.slab.get()
	ic.c.FD, ic.c.Accepted = fd, now
	ic.loop, ic.flags = uint16(l.idx), fPre
	l.slab.pushBack(&l.pre, ic)
	if err := l.arm(ic); err != nil {
		l.ing.o.Logger.Error("ingress: cannot watch a new connection", "loop", l.idx, "err", os.NewSyscallError("epoll_ctl", err))
		l.end(ic, nil)
		return
	}
	l.cnt[cAccepted]++
}

// pauseAccept takes the listeners out of this loop's epoll until the backoff
// (10 ms, doubling to 1 s, reset by a successful accept) has passed.
func (l *loop) pauseAccept(now int64) {
	l.unlisten()
	l.accBackoff = min(max(2*l.accBackoff, acceptBackoffMin), acceptBackoffMax)
	l.accRetryAt = now + l.accBackoff
}

// listen puts the listeners into this loop's epoll.
func (l *loop) listen() error {
	l.accRetryAt = 0
	if !l.accepting || l.listening {
		return nil
	}
	for i, ln := range l.e.lns {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(ln.fd), Pad: int32(tagListen0 - i)}
		err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, ln.fd, &ev)
		if errors.Is(err, unix.EINVAL) { // a kernel before 4.5: every loop wakes, one wins the accept
			ev.Events = unix.EPOLLIN
			err = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, ln.fd, &ev)
		}
		if err != nil {
			for _, done := range l.e.lns[:i] {
				unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, done.fd, nil)
			}
			return os.NewSyscallError("epoll_ctl", err)
		}
	}
	l.listening = true
	return nil
}

func (l *loop) unlisten() {
	if !l.listening {
		return
	}
	for _, ln := range l.e.lns {
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, ln.fd, nil)
	}
	l.listening = false
}

func (l *loop) stopAccepting() {
	l.accepting = false
	l.accRetryAt = 0
	l.unlisten()
}
