package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"hongbao/loadclient"
	"hongbao/proto"
)

// maxPartial is the most bytes of an unfinished frame a connection keeps
// between reads: a PONG is 12 bytes and an ERROR 13, and nothing else is
// expected.
const maxPartial = 64

// pconn is one connection of a loop. Owned by the loop.
type pconn struct {
	fd      int
	out     int // PINGs written and not yet answered
	k       int // bytes in partial
	partial [maxPartial]byte
}

// loop is a closed PING loop over its connections, on its own epoll
// instance, level-triggered: each round reads every readable connection
// once, answers each PONG with the next PING (one write per connection),
// and records latencies from the PING's stamp, its write time. Everything
// in it belongs to the goroutine that runs it until run returns.
type loop struct {
	ep       int
	conns    []pconn
	inflight int
	// startNs: first PINGs; [winStart, winEnd): the measured window; no PING
	// is sent from winEnd on, and by drainEnd every PONG should be in.
	startNs, winStart, winEnd, drainEnd int64

	hist     *loadclient.LatencyHistogram // PONGs read in the window
	inWindow uint64
	sent     uint64 // PINGs written, all phases
	answered uint64 // PONGs read, all phases
	err      error

	buf []byte // read buffer: a partial frame, then one read
	out []byte // the PINGs of one connection's write
}

func newLoop(fds []int, inflight int) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l := &loop{ep: ep, inflight: inflight, hist: new(loadclient.LatencyHistogram),
		buf: make([]byte, 64<<10), out: make([]byte, 0, inflight*proto.PingLen)}
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

// run waits for startNs, sends every connection's first PINGs and loops
// until drainEnd or until nothing is outstanding after winEnd.
func (l *loop) run() {
	time.Sleep(time.Until(time.Unix(0, l.startNs)))
	now := time.Now().UnixNano()
	for i := range l.conns {
		if !l.send(&l.conns[i], l.inflight, now) {
			return
		}
	}
	events := make([]unix.EpollEvent, 256)
	for {
		now = time.Now().UnixNano()
		if now >= l.drainEnd || (now >= l.winEnd && l.sent == l.answered) {
			return
		}
		n, err := unix.EpollWait(l.ep, events, 10) // ms: the phase checks above need no finer
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

// read reads what c has, handles its PONGs and sends as many PINGs as it got
// PONGs while the window lasts. It reports false on a failure (l.err).
func (l *loop) read(c *pconn) bool {
	copy(l.buf, c.partial[:c.k])
	n, err := unix.Read(c.fd, l.buf[c.k:])
	if err == unix.EAGAIN || err == unix.EINTR {
		return true
	}
	if err != nil || n == 0 {
		l.err = fmt.Errorf("connection fd %d: read: %v (EOF: server closed it) with %d PINGs outstanding", c.fd, err, c.out)
		return false
	}
	now := time.Now().UnixNano()
	data := l.buf[:c.k+n]
	pongs := 0
	for len(data) > 0 {
		f, m, perr := proto.NextResponse(data)
		if perr != nil {
			l.err = fmt.Errorf("connection fd %d: %w", c.fd, perr)
			return false
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
			l.err = fmt.Errorf("connection fd %d: server sent ERROR %d", c.fd, f.Body[0])
			return false
		default:
			l.err = fmt.Errorf("connection fd %d: unexpected %v", c.fd, f.Type)
			return false
		}
	}
	if len(data) > maxPartial {
		l.err = fmt.Errorf("connection fd %d: %d bytes of an unexpected frame", c.fd, len(data))
		return false
	}
	c.k = copy(c.partial[:], data)
	c.out -= pongs
	l.answered += uint64(pongs)
	if pongs > 0 && now < l.winEnd {
		return l.send(c, pongs, now)
	}
	return true
}

// send writes n PINGs stamped now to c in one write.
func (l *loop) send(c *pconn, n int, now int64) bool {
	l.out = l.out[:0]
	for range n {
		l.out = proto.AppendPing(l.out, uint64(now))
	}
	w, err := unix.Write(c.fd, l.out)
	if err != nil || w != len(l.out) {
		// At most maxInflight × 12 bytes outstanding: a socket buffer that
		// cannot take them means the server stopped reading.
		l.err = fmt.Errorf("connection fd %d: write of %d PINGs: %d of %d bytes: %v", c.fd, n, w, len(l.out), err)
		return false
	}
	c.out += n
	l.sent += uint64(n)
	return true
}
