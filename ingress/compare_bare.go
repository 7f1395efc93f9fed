// Bare mode (Options.Bare, the server's -pipeline=none), for comparison
// only: no rings and no SETs; the ingress answers every request itself, with
// every answer of one read in one write, as the stand-in for the cost of
// loopback TCP alone. It keeps no output queue: a client whose socket cannot
// take a read's answers in one write is dropped. newProc chooses these
// functions once; nothing on the rings' path tests for Bare.

package ingress

import (
	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/proto"
)

// bareProc makes p answer logged-in connections itself.
func bareProc(p *proc) {
	p.frame, p.loggedIn, p.cutOff = (*proc).answerBare, (*proc).loginBare, (*proc).cutBare
}

// bareStatus is what the stages would answer with no state at all, by
// request type.
var bareStatus = [proto.Ping + 1]uint8{
	proto.Shake: proto.ShakeNothing, proto.Open: proto.OpenNoSuch,
	proto.Send: proto.SendInvalid, proto.Chat: proto.ChatOffline,
}

// answerBare handles one well-formed frame for ic: after LOGIN, with its
// answer into p.out.
func (p *proc) answerBare(ic *iconn, f proto.Frame, now int64) result {
	c := &ic.c
	if c.User == 0 {
		return p.login(c, f, now)
	}
	switch f.Type {
	case proto.Login:
		return p.cutBare(c, proto.ErrCodeMalformed)
	case proto.Ping:
		p.out = proto.AppendPong(p.out, f.Stamp)
	case proto.Open:
		env := f.Open()
		p.out = appendStatus(p.out, f.Type, f.Stamp, bareStatus[f.Type], env, 0)
	case proto.Chat:
		to, _ := f.Chat()
		p.out = appendStatus(p.out, f.Type, f.Stamp, bareStatus[f.Type], 0, to)
	default:
		p.out = appendStatus(p.out, f.Type, f.Stamp, bareStatus[f.Type], 0, 0)
	}
	return resMore
}

// loginBare answers a LOGIN that passed its checks LOGIN_ACK 0 itself: the
// connection stays the ingress's.
func (p *proc) loginBare(c *conn.Conn, f proto.Frame, user uint32, _ int64) result {
	c.User = user
	p.cnt[cLogins]++
	p.out = proto.AppendLoginAck(p.out, f.Stamp, proto.LoginOK, user)
	return resMore
}

// cutBare ends a logged-in connection for a violation: ERROR code, then
// the ingress closes it, as before LOGIN.
func (p *proc) cutBare(_ *conn.Conn, code uint8) result { return p.closeWith(code) }
