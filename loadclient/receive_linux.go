//go:build linux

package loadclient

import (
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// Receiving: reads within a per-connection budget, frames split across reads, and what each
// frame from the server does to the counters, the histograms and the connection.

// read reads what c has, up to its budget, and handles every whole frame. With edge-triggered
// epoll a read that fills less than the buffer has emptied the socket, unless the peer closed
// (hup), when reading on finds the end.
func (l *loop) read(c *uconn, idx uint32, hup bool) {
	for range readsPerConn {
		off := 0
		if c.in != nil {
			off = copy(l.rbuf, *c.in)
			l.putBuf(c.in)
			c.in = nil
		}
		n, err := unix.Read(int(c.fd), l.rbuf[off:])
		if n <= 0 {
			switch {
			case err == unix.EAGAIN:
				l.keep(c, l.rbuf[:off])
			case err == unix.EINTR:
				l.keep(c, l.rbuf[:off])
				continue
			default: // EOF or an error: the connection is gone
				if err == nil && c.state == stLogin {
					l.connectFailed(c, "EOF", "read", "closed before LOGIN_ACK")
				} else {
					l.loginFailed(c, "read", err)
				}
				l.drop(c, idx, errReset)
			}
			return
		}
		buf := l.rbuf[:off+n]
		for len(buf) > 0 {
			f, k, perr := proto.NextResponse(buf)
			if perr != nil {
				if c.state == stLogin {
					l.connectFailed(c, "protocol", "read", perr.Error())
				}
				l.drop(c, idx, errProtocol)
				return
			}
			if k == 0 {
				break
			}
			if !l.handle(c, idx, f) {
				return
			}
			buf = buf[k:]
		}
		l.keep(c, buf)
		if off+n < len(l.rbuf) && !hup {
			return
		}
	}
	l.again = append(l.again, idx)
}

// keep saves the start of a split frame for the next read.
func (l *loop) keep(c *uconn, rest []byte) {
	if len(rest) == 0 {
		return
	}
	b := l.getBuf()
	*b = append(*b, rest...)
	c.in = b
}

// readAgain gives the connections that used up their read budget another turn.
func (l *loop) readAgain() {
	again := l.again
	l.again = l.again[len(l.again):]
	for _, idx := range again {
		if c := &l.conns[idx]; c.fd >= 0 && c.state != stConnecting {
			l.read(c, idx, false)
		}
	}
	if len(l.again) == 0 {
		l.again = again[:0]
	} else {
		l.again = append(again[:0], l.again...)
	}
}

// handle acts on one frame from the server. It returns false when it dropped the connection.
func (l *loop) handle(c *uconn, idx uint32, f proto.Frame) bool {
	switch f.Type {
	case proto.Envelope:
		l.c.Pushes[pushEnvelope]++
		if c.state != stReady {
			l.c.Errors[errProtocol]++
			return true
		}
		if l.holding {
			l.c.Unopened++ // the run's figures are being read: an OPEN now would move its money
			return true
		}
		env, _, _, _ := f.Envelope()
		l.openPush(c, idx, env)
		return true
	case proto.ChatDeliver:
		l.c.Pushes[pushChat]++
		l.hists[histDeliver].Record(l.now - int64(f.Stamp))
		return true
	case proto.Pong:
		l.c.Errors[errProtocol]++ // we never PING
		return true
	case proto.Error:
		class := errProtocol
		switch f.ErrorCode() {
		case proto.ErrCodeTooSlow:
			class = errOverload
		case proto.ErrCodeShuttingDown:
			class = errReset
		case proto.ErrCodeMoved: // the user's SET failed over: reconnect, and a LOGIN finds its owner
			class = errReset
			l.c.Moved++
		case proto.ErrCodeLoginTimeout:
			class = errTimeout
		}
		if c.state == stLogin {
			l.connectFailed(c, codeKind("ERROR ", f.ErrorCode()), "LOGIN answered by", "")
		}
		lost := &l.c.Lost
		if f.ErrorCode() == proto.ErrCodeMoved {
			// Answered "not carried out" (docs/PROTOCOL.md, A SET that moves), but for OPENs:
			// the envelope's SET may have drawn a share. They are lost, and sent again.
			l.c.Lost[reqOpen] += uint64(c.inflight[reqOpen])
			c.inflight[reqOpen] = 0
			lost = &l.c.NotDone
		}
		l.dropAs(c, idx, class, lost)
		return false
	}
	r := answerOf(f.Type)
	if c.inflight[r] == 0 {
		l.c.Errors[errProtocol]++ // an answer to nothing we asked
		return true
	}
	c.inflight[r]--
	c.since = l.nowMs
	st := f.Body[0] // every answer starts with its status
	if st >= maxStatus {
		l.c.Errors[errProtocol]++
		st = maxStatus - 1
	}
	l.c.Status[r][st]++
	if st == overloadStatus[r] {
		l.c.Errors[errOverload]++
	}
	lat := l.now - int64(f.Stamp)
	if f.Stamp > uint64(l.now) || lat > LatencyMax {
		l.c.Errors[errProtocol]++ // not a stamp we sent
	} else {
		l.hists[r].Record(lat)
		if r == reqShake {
			l.live.Record(lat)
		}
	}
	switch r {
	case reqLogin:
		if st == proto.LoginWrongGateway {
			l.redirect(c, idx, f.LoginRedirect())
			return false
		}
		if st != proto.LoginOK {
			// A refused login (bad token, bad user) would be refused again: no reconnect.
			l.connectFailed(c, codeKind("LOGIN status ", f.Body[0]), "LOGIN refused by", "")
			l.c.Errors[errProtocol]++
			l.closeConn(c, &l.c.Lost)
			l.setState(c, stDead)
			return false
		}
		l.loggedIn(c)
		l.setState(c, stReady)
		if l.opens.n != 0 {
			l.openAgain(c, idx) // the OPENs its last connection left unsettled
		}
		if l.resend.pending != 0 {
			l.shakeAgain(c, idx) // the SHAKEs its last connection left in flight
		}
	case reqShake:
		l.shakeAnswered(idx, int64(f.Stamp), st)
		if st == proto.ShakeGot {
			_, env, amount := f.ShakeResult()
			l.c.ShakeAmount += uint64(amount)
			if l.hist.file != nil {
				req := f.Stamp
				if id := l.resend.shakeID(int64(f.Stamp)); id != 0 {
					req = id
				}
				l.hist.told(c.user, "shake", req, st, env, amount)
			}
		}
	case reqOpen:
		_, env, amount := f.OpenResult()
		if l.hist.file != nil && (st == proto.OpenOK || st == proto.OpenAlready) {
			l.hist.told(c.user, "open", env, st, env, amount)
		}
		if !l.openAnswered(idx, st, env, amount) {
			l.c.Errors[errProtocol]++ // no OPEN of that envelope in flight
		}
	}
	return true
}
