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
	fDown                      // its logged-in connection failed and it has not logged in again: downAt holds when
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
	gw       uint8        // where it connects: 0 a -server address (see srv), else l.gws[gw-1]
	inflight [nReq]uint16 // requests sent and not answered, by kind
	srv      uint16       // with gw 0 it connects to -server address (user−1+srv) mod count: srv moves on at each failure
	since    uint32       // loop ms: when the current wait began (connect, login, oldest answer)
	downAt   uint32       // loop ms: when its logged-in connection failed, while fDown
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

// drop closes c after an error of class, counts its requests in flight as lost (its OPENs are
// sent again after the next login) and schedules a reconnect elsewhere (nextServer) after the
// backoff, unless the run has ended and c has no open under way.
// A logged-in connection that fails starts an outage, which its next login ends; one dropped
// for a timeout has been without service since its last answer.
func (l *loop) drop(c *uconn, idx uint32, class int) { l.dropAs(c, idx, class, &l.c.Lost) }

// dropAs is drop with the requests in flight counted in inflight.
func (l *loop) dropAs(c *uconn, idx uint32, class int, inflight *[nReq]uint64) {
	l.c.Errors[class]++
	if c.state == stReady {
		c.flags |= fDown
		c.downAt = l.nowMs
		if class == errTimeout {
			c.downAt = c.since
		}
		l.c.Outages++
	}
	l.closeConn(c, inflight)
	l.setState(c, stIdle)
	l.nextServer(c)
	l.retry(c, idx)
}

// nextServer picks where c connects after a failure. From a gateway a LOGIN_ACK 3 named it
// goes back to its -server address, which knows the owner of the moment; from a -server
// address to the next one in turn, for a gateway that died refuses for good and any live one
// answers LOGIN_ACK 3 with the owner.
func (l *loop) nextServer(c *uconn) {
	if c.gw != 0 {
		c.gw = 0
		return
	}
	if c.srv++; int(c.srv) >= len(l.servers) {
		c.srv = 0
	}
}

// loggedIn ends c's outage, if it had one: a reconnect, and the time it was without a
// connection.
func (l *loop) loggedIn(c *uconn) {
	c.fails = 0
	if c.flags&fDown == 0 {
		return
	}
	c.flags &^= fDown
	l.c.Reconnects++
	l.c.OutageMaxNs = max(l.c.OutageMaxNs, int64(l.nowMs-c.downAt)*int64(time.Millisecond))
}

// closeConn closes c's socket, adds its requests in flight to count, marks its OPENs in flight
// to be sent again after the next login and returns its buffers.
func (l *loop) closeConn(c *uconn, count *[nReq]uint64) {
	if c.fd >= 0 {
		unix.Close(int(c.fd)) // also removes it from the epoll set
		c.fd = -1
	}
	if l.opens.n != 0 {
		l.openLost(c.user - l.first)
	}
	if k := c.inflight[reqShake]; k > 0 {
		l.shakesLost(c.user-l.first, int(k))
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
	c.flags &= fDown // an outage lasts across connections until a login ends it
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
// unanswered and counts as a timeout, and the opens under way stay unresolved (OpenPending). A
// user not back from an outage was without a connection until the end of the sends.
func (l *loop) closeAll() {
	before := l.c.Unanswered
	endMs := uint32(max(0, min(l.endNs, l.now)-l.base) / int64(time.Millisecond))
	for i := range l.conns {
		c := &l.conns[i]
		if c.flags&fDown != 0 && endMs > c.downAt {
			l.c.OutageMaxNs = max(l.c.OutageMaxNs, int64(endMs-c.downAt)*int64(time.Millisecond))
		}
		l.closeConn(c, &l.c.Unanswered)
		if c.state != stDead {
			l.setState(c, stIdle)
		}
	}
	for r := range nReq {
		l.c.Errors[errTimeout] += l.c.Unanswered[r] - before[r]
	}
}
