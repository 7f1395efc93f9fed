//go:build linux

package loadclient

import (
	"time"

	"golang.org/x/sys/unix"
)

// A user's connection: its state, the gauges that follow it, and the ways it ends — dropped
// after an error (to reconnect), timed out by the sweep, closed at the end of the run.

// Connection states.
const (
	stIdle       uint8 = iota // not connected: queued to connect, waiting out a backoff, or done
	stConnecting              // connect in progress
	stLogin                   // connected, LOGIN sent, LOGIN_ACK awaited
	stReady                   // logged in: sends on the schedule
	stDead                    // login refused: never reconnects
)

// uconn flags.
const (
	fDirty   uint8 = 1 << iota // on the loop's flush list this round
	fBlocked                   // the last write stopped short: wait for EPOLLOUT
)

// uconn is one user's connection, owned by its loop: 48 bytes (TestConnSize), so a loop of
// 10,000 users keeps 480 KB of them. Buffers are borrowed from the loop only while needed: in holds the
// start of a frame split across reads, out the output a write has not taken yet.
type uconn struct {
	fd       int32 // −1 when closed
	user     uint32
	state    uint8
	flags    uint8
	fails    uint8        // failed attempts since the last login: the backoff exponent
	gw       uint8        // where it connects: 0 the default -server address, else l.gws[gw-1]
	inflight [nReq]uint16 // requests sent and not answered, by kind
	since    uint32       // loop ms: when the current wait began (connect, login, oldest answer)
	in, out  *[]byte      // nil when empty
}

func (c *uconn) waiting() bool {
	for _, n := range c.inflight {
		if n != 0 {
			return true
		}
	}
	return false
}

// setState moves c to state s, keeping the loop's gauges of connections up and connecting.
func (l *loop) setState(c *uconn, s uint8) {
	switch c.state {
	case stReady:
		l.up--
	case stConnecting, stLogin:
		l.connecting--
	}
	switch s {
	case stReady:
		l.up++
	case stConnecting, stLogin:
		l.connecting++
	}
	c.state = s
}

// drop closes c after an error of class, counts its requests in flight as lost and
// schedules a reconnect, unless the run has ended. A connect that failed at a gateway a
// LOGIN_ACK 3 named goes back to the default address, which knows the owner now.
func (l *loop) drop(c *uconn, idx uint32, class int) {
	l.c.Errors[class]++
	l.closeConn(c, &l.c.Lost)
	l.setState(c, stIdle)
	if class == errConnect {
		c.gw = 0
	}
	l.retry(c, idx)
}

// closeConn closes c's socket, adds its requests in flight to count and returns its buffers.
func (l *loop) closeConn(c *uconn, count *[nReq]uint64) {
	if c.fd >= 0 {
		unix.Close(int(c.fd)) // also removes it from the epoll set
		c.fd = -1
	}
	for r, n := range c.inflight {
		count[r] += uint64(n)
		c.inflight[r] = 0
	}
	if c.in != nil {
		l.putBuf(c.in)
		c.in = nil
	}
	if c.out != nil {
		l.putBuf(c.out)
		c.out = nil
	}
	c.flags = 0
}

// sweep drops the connections that waited too long: a connect, a login or an answer.
func (l *loop) sweep() {
	connectMs := uint32(l.plan.cfg.ConnectTimeout / time.Millisecond)
	timeoutMs := uint32(l.plan.cfg.Timeout / time.Millisecond)
	for i := range l.conns {
		c := &l.conns[i]
		waited := l.nowMs - c.since
		switch {
		case c.state == stConnecting && waited > connectMs:
			l.connectFailed(c, "connect timeout", "connect", "no answer within -connect-timeout")
			l.drop(c, uint32(i), errConnect)
		case c.state == stLogin && waited > timeoutMs:
			l.connectFailed(c, "LOGIN timeout", "LOGIN", "no LOGIN_ACK within -timeout")
			l.drop(c, uint32(i), errTimeout)
		case c.state == stReady && waited > timeoutMs && c.waiting():
			l.drop(c, uint32(i), errTimeout)
		}
	}
}

// closeAll closes every connection at the end of the run; what is still in flight is
// unanswered and counts as a timeout.
func (l *loop) closeAll() {
	before := l.c.Unanswered
	for i := range l.conns {
		c := &l.conns[i]
		l.closeConn(c, &l.c.Unanswered)
		if c.state != stDead {
			l.setState(c, stIdle)
		}
	}
	for r := range nReq {
		l.c.Errors[errTimeout] += l.c.Unanswered[r] - before[r]
	}
}
