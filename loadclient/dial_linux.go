//go:build linux

package loadclient

import (
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// Dialing: the queue of users to connect, the -connect-rate that paces it, non-blocking
// connects from the -source addresses, the LOGIN that follows, the backoff after a failure,
// and the note of why each failed.

// dialer is what a loop connects by.
type dialer struct {
	// Addresses: per-loop copies, because unix.Connect and Bind write into the Sockaddr.
	servers []unix.Sockaddr
	sources []unix.Sockaddr
	family  int
	srcNext int

	gws []gateway // where LOGIN_ACK 3 sent users: uconn.gw−1 indexes it

	connQ      []uint32 // users to connect, FIFO from connHead
	connHead   int
	retries    retryHeap
	tokens     float64
	connRate   float64 // per ns
	lastRefill int64
}

// newDialer queues every user of r to connect, at r's share of the process's -connect-rate.
func newDialer(id int, plan *runPlan, r Range) dialer {
	d := dialer{connQ: make([]uint32, r.Len()), tokens: 1, srcNext: id}
	for i := range d.connQ {
		d.connQ[i] = uint32(i)
	}
	localShare := float64(r.Len()) / float64(plan.local.Len())
	d.connRate = float64(plan.cfg.ConnectRate) * localShare / 1e9
	for _, s := range plan.servers {
		d.servers = append(d.servers, sockaddr(s.Addr(), int(s.Port())))
	}
	d.family = unix.AF_INET
	if plan.servers[0].Addr().Is6() {
		d.family = unix.AF_INET6
	}
	for _, a := range plan.sources {
		d.sources = append(d.sources, sockaddr(a, 0))
	}
	return d
}

// connectDue starts the connects the rate allows and moves due retries to the queue. After the
// end of the sends only users with opens under way connect: their OPENs are sent again.
func (l *loop) connectDue() {
	for len(l.retries) > 0 && l.retries[0].at <= l.now {
		l.connQ = append(l.connQ, l.retries.pop().idx)
	}
	l.tokens = min(l.tokens+float64(l.now-l.lastRefill)*l.connRate, max(1, l.connRate*1e7)) // burst: 10 ms worth
	l.lastRefill = l.now
	for l.connHead < len(l.connQ) && l.tokens >= 1 {
		idx := l.connQ[l.connHead]
		l.connHead++
		if l.now >= l.endNs && !l.opens.has(idx) && !l.resend.has(idx) {
			continue
		}
		l.tokens--
		l.dial(&l.conns[idx], idx)
	}
	if l.connHead == len(l.connQ) {
		l.connQ, l.connHead = l.connQ[:0], 0
	}
}

func (l *loop) dial(c *uconn, idx uint32) {
	if c.state != stIdle || c.fd >= 0 {
		return
	}
	to, family := l.target(c)
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.dialFailed(c, idx, -1, "socket for", err)
		return
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // we coalesce ourselves
	if len(l.sources) > 0 {
		src := l.sources[l.srcNext%len(l.sources)]
		l.srcNext++
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		// Pick the port at connect, from the whole 4-tuple, not at bind: without it every
		// bind(src:0) takes a port of its own and 28,000 connections exhaust them.
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		if err := unix.Bind(fd, src); err != nil {
			l.dialFailed(c, idx, fd, "bind -source for", err)
			return
		}
	}
	err = unix.Connect(fd, to)
	if err != nil && err != unix.EINPROGRESS {
		l.dialFailed(c, idx, fd, "connect", err)
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(idx)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.dialFailed(c, idx, fd, "epoll_ctl for", err)
		return
	}
	c.fd = int32(fd)
	c.since = l.nowMs
	l.setState(c, stConnecting)
}

// dialFailed closes fd (−1: none), counts a connect error, notes why and schedules a retry
// elsewhere (see nextServer).
func (l *loop) dialFailed(c *uconn, idx uint32, fd int, op string, err error) {
	if fd >= 0 {
		unix.Close(fd)
	}
	l.c.Errors[errConnect]++
	l.errnoFailed(c, op, err)
	l.nextServer(c)
	l.retry(c, idx)
}

// connected finishes a connect and sends LOGIN.
func (l *loop) connected(c *uconn, idx uint32) {
	soerr, err := unix.GetsockoptInt(int(c.fd), unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil || soerr != 0 {
		if err != nil {
			l.errnoFailed(c, "getsockopt SO_ERROR for", err)
		} else {
			l.errnoFailed(c, "connect", unix.Errno(soerr))
		}
		l.drop(c, idx, errConnect)
		return
	}
	l.c.Connects++
	l.setState(c, stLogin)
	c.since = l.nowMs
	var token []byte
	if l.plan.secret != nil {
		token = proto.MintToken(l.rbuf[:0:proto.TokenLen], l.plan.secret, c.user, time.Now().Add(24*time.Hour).Unix())
	}
	b := l.outBuf(c, idx)
	*b = proto.AppendLogin(*b, uint64(l.now), c.user, token)
	l.sent(c, reqLogin)
}

// retry schedules a reconnect of c after an exponential backoff (backoffMin doubling up to
// backoffMax) with ±25% jitter, so that the users of a gateway that failed do not all come
// back in the same millisecond. After the end of the sends only a user with opens under way
// reconnects.
func (l *loop) retry(c *uconn, idx uint32) {
	if l.now >= l.endNs && !l.opens.has(idx) && !l.resend.has(idx) || c.state == stDead {
		return
	}
	d := min(backoffMin<<min(c.fails, 8), backoffMax)
	d = d*3/4 + time.Duration(l.rng.Int64N(int64(d)/2+1))
	if c.fails < 255 {
		c.fails++
	}
	l.retries.push(retryAt{l.now + int64(d), idx})
}

// connectFailed notes a failure of c to connect or log in, of kind, in the counters; the
// first of its kind is kept as "op server: what" (what empty: the kind).
func (l *loop) connectFailed(c *uconn, kind, op, what string) {
	f := l.c.ConnectFailures.note(kind, l.now)
	if f == nil {
		return
	}
	if what == "" {
		what = kind
	}
	f.First = op + " " + l.targetAddr(c).String() + ": " + what
}

// errnoFailed is connectFailed for a system call's error: the kind is its errno's name.
func (l *loop) errnoFailed(c *uconn, op string, err error) {
	if e, ok := err.(unix.Errno); ok {
		kind := unix.ErrnoName(e)
		if kind == "" {
			kind = "errno " + strconv.Itoa(int(e))
		}
		l.connectFailed(c, kind, op, e.Error())
		return
	}
	l.connectFailed(c, "error", op, err.Error())
}

// loginFailed is errnoFailed for a connection that failed while logging in; a failure of
// a connection already logged in is no connect failure.
func (l *loop) loginFailed(c *uconn, op string, err error) {
	if c.state == stLogin {
		l.errnoFailed(c, op, err)
	}
}

// codeKind names the failure of a status or error code: prefix and the code.
func codeKind(prefix string, code uint8) string {
	return prefix + strconv.Itoa(int(code))
}
