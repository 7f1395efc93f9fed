package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/proto"
)

// maxPartial is the most bytes of an unfinished frame a connection keeps
// between reads: a PONG is 12 bytes and an ERROR 13.
const maxPartial = 64

// pconn is one connection of a loop.
type pconn struct {
	fd, out, k int // out: PINGs unanswered; k: bytes in partial
	partial    [maxPartial]byte
}

// loop is a closed PING loop over its connections on its own epoll
// instance, level-triggered: each round reads every readable connection
// once, answers its PONGs with as many PINGs in one write, and records
// latencies from each PING's stamp, its write time. It belongs to the
// goroutine that runs it until run returns.
type loop struct {
	ep       int
	conns    []pconn
	inflight int
	// First PINGs at startNs; the window is [winStart, winEnd), after which
	// no PING is sent, and by drainEnd every PONG should be in.
	startNs, winStart, winEnd, drainEnd int64

	hist                     *loadclient.LatencyHistogram // PONGs read in the window
	inWindow, sent, answered uint64
	err                      error
	buf, out                 []byte // a partial frame then one read; one connection's PINGs
}

func newLoop(fds []int, inflight int) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l := &loop{ep: ep, inflight: inflight, hist: new(loadclient.LatencyHistogram), buf: make([]byte, 64<<10), out: make([]byte, 0, inflight*proto.PingLen)}
	for i, fd := range fds {
		l.conns = append(l.conns, pconn{fd: fd})
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(i)} // Fd holds the index
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(ep)
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	return l, nil
}

func (l *loop) close() { unix.Close(l.ep) }

// run sends every connection's first PINGs at startNs and loops until
// drainEnd or until nothing is outstanding after winEnd.
func (l *loop) run() {
	time.Sleep(time.Until(time.Unix(0, l.startNs)))
	now := time.Now().UnixNano()
	for i := range l.conns {
		if !l.send(&l.conns[i], l.inflight, now) {
			return
		}
	}
	events := make([]unix.EpollEvent, 256)
	for now = time.Now().UnixNano(); now < l.drainEnd && (now < l.winEnd || l.sent != l.answered); now = time.Now().UnixNano() {
		n, err := unix.EpollWait(l.ep, events, 10) // ms: the phase checks need no finer
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.err = os.NewSyscallError("epoll_wait", err)
			return
		}
		for _, ev := range events[:n] {
			if !l.read(&l.conns[ev.Fd]) {
				return
			}
		}
	}
}

// fail records a failure of c and reports false.
func (l *loop) fail(c *pconn, format string, args ...any) bool {
	l.err = fmt.Errorf("connection fd %d: "+format, append([]any{c.fd}, args...)...)
	return false
}

// read reads what c has, handles its PONGs and, while the window lasts,
// sends as many PINGs as it got PONGs; false on a failure (l.err).
func (l *loop) read(c *pconn) bool {
	copy(l.buf, c.partial[:c.k])
	n, err := unix.Read(c.fd, l.buf[c.k:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return true
	}
	if err != nil || n == 0 {
		return l.fail(c, "read: %v (EOF: server closed it) with %d PINGs outstanding", err, c.out)
	}
	now, data, pongs := time.Now().UnixNano(), l.buf[:c.k+n], 0
	for len(data) > 0 {
		f, m, err := proto.NextResponse(data)
		if err != nil {
			return l.fail(c, "%w", err)
		}
		if m == 0 {
			break
		}
		data = data[m:]
		switch f.Type {
		case proto.Pong:
			pongs++
			if now >= l.winStart && now < l.winEnd {
				l.hist.Record(now - int64(f.Stamp))
				l.inWindow++
			}
		case proto.Error:
			return l.fail(c, "server sent ERROR %d", f.Body[0])
		default:
			return l.fail(c, "unexpected %v", f.Type)
		}
	}
	if len(data) > maxPartial {
		return l.fail(c, "%d bytes of an unexpected frame", len(data))
	}
	c.k = copy(c.partial[:], data)
	c.out -= pongs
	l.answered += uint64(pongs)
	return pongs == 0 || now >= l.winEnd || l.send(c, pongs, now)
}

// send writes n PINGs stamped now to c in one write.
func (l *loop) send(c *pconn, n int, now int64) bool {
	l.out = l.out[:0]
	for range n {
		l.out = proto.AppendPing(l.out, uint64(now))
	}
	// At most maxInflight × 12 bytes outstanding: a socket buffer that
	// cannot take them means the server stopped reading.
	if w, err := unix.Write(c.fd, l.out); err != nil || w != len(l.out) {
		return l.fail(c, "write of %d PINGs: %d of %d bytes: %v", n, w, len(l.out), err)
	}
	c.out += n
	l.sent += uint64(n)
	return true
}
