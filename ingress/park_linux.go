package ingress

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// waiter is how an idle loop blocks, chosen once in newLoop: rawWait, or a
// parker with Options.NetpollWait.
type waiter interface {
	// wait is epoll_wait(2) on the loop's epoll with a timeout in ms (-1:
	// none), into the loop's events.
	wait(timeoutMs int) (int, error)
	close()
}

// rawWait blocks in epoll_wait itself, keeping the loop's P until the
// runtime's sysmon retakes it (docs/DESIGN.md, Idle loops block in
// epoll_wait).
type rawWait struct {
	epfd   int
	events []unix.EpollEvent
}

func (w *rawWait) wait(timeoutMs int) (int, error) {
	return unix.EpollWait(w.epfd, w.events, timeoutMs)
}

func (w *rawWait) close() {}

// parker blocks a loop in the Go runtime's netpoller instead of a raw
// epoll_wait (Options.NetpollWait). An epoll descriptor is itself pollable:
// it is readable while its instance has events ready, and every new event
// wakes those who poll it. So a duplicate of the loop's epfd registered in
// the runtime's poller lets the loop's goroutine park until its own epoll
// has something, holding no P meanwhile: whatever else is runnable (a SET
// goroutine, the journal writer, NATS's reader) runs at once on the P the
// loop lets go, where a raw epoll_wait keeps its P until sysmon retakes it
// (20 µs to 10 ms later). Every poll of the loop's own epoll is still a
// non-blocking epoll_wait on the loop's goroutine.
type parker struct {
	epfd     int             // the loop's, for the polls that need no park
	f        *os.File        // the duplicate, owned: closed by close
	rc       syscall.RawConn // f's
	events   []unix.EpollEvent
	poll     func(fd uintptr) bool // p.pollOnce, bound once: Read allocates nothing
	n        int
	err      error
	deadline bool // a read deadline is set on f
}

func newParker(epfd int, events []unix.EpollEvent) (*parker, error) {
	fd, err := unix.FcntlInt(uintptr(epfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil { // os.NewFile registers only non-blocking descriptors
		unix.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p := &parker{epfd: epfd, f: os.NewFile(uintptr(fd), "epoll"), events: events}
	if p.rc, err = p.f.SyscallConn(); err != nil {
		p.f.Close()
		return nil, err
	}
	p.poll = p.pollOnce
	return p, nil
}

// wait is epoll_wait(2) on the loop's epoll with a timeout in ms (-1:
// none), parked in the netpoller between non-blocking polls. It polls once
// before anything else, so that a busy round, which finds events at once,
// sets no deadline. The poll of the park itself is not to be skipped: the
// runtime's poller reports the epoll descriptor edge-triggered, so an event
// that came before the park is seen only there.
func (p *parker) wait(timeoutMs int) (int, error) {
	if n, err := unix.EpollWait(p.epfd, p.events, 0); n != 0 || err != nil || timeoutMs == 0 {
		return n, err
	}
	switch {
	case timeoutMs >= 0:
		p.f.SetReadDeadline(time.Now().Add(time.Duration(timeoutMs) * time.Millisecond))
		p.deadline = true
	case p.deadline:
		p.f.SetReadDeadline(time.Time{})
		p.deadline = false
	}
	p.n, p.err = 0, nil
	if err := p.rc.Read(p.poll); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, err
	}
	return p.n, p.err
}

// pollOnce is a non-blocking epoll_wait; false: nothing ready, park until
// the epoll descriptor becomes readable (or the deadline).
func (p *parker) pollOnce(fd uintptr) bool {
	p.n, p.err = unix.EpollWait(int(fd), p.events, 0)
	return p.n > 0 || (p.err != nil && p.err != unix.EINTR)
}

func (p *parker) close() { p.f.Close() }
