package ingress

import (
	"slices"
	"sync"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// This file is the per-frame half of the ingress, shared by both modes: what
// each decoded frame becomes. The I/O half (epoll loops, netpoll goroutines)
// only moves bytes and acts on the result.

// result says why consume stopped and what the I/O half must do next.
type result uint8

const (
	resMore  result = iota // every complete frame handled: the rest is a partial frame, read more
	resStall               // a full ring refused a frame: keep it and what follows, retry later
	resFatal               // KFatal published: ignore further input until the peer goes
	resClose               // an ingress-owned connection ends: write p.out, then release it
)

// proc turns frames into events (or, in Bare mode and before LOGIN, into
// answers in out). One per epoll loop; one per netpoll connection goroutine.
// Not safe for concurrent use.
type proc struct {
	bus      *event.Bus
	redirect func(set int) string // the address of the gateway that runs set
	secret   bool
	ver      *proto.Verifier // this loop's; nil in netpoll, which borrows from verPool
	verPool  *sync.Pool      // of *proto.Verifier, for netpoll
	cnt      *counters
	out      []byte // answers of the current read (Bare), or the closing frame of an ingress-owned connection

	// refused is the open batch of refusals ("overloaded", and CHAT_ACK 3
	// for the CHAT rate) of the connection being consumed (nil: none),
	// published when a frame is not refused or consume returns: one ring
	// slot and one egress pass for each run of a read's refusals (all of
	// them, when a read is shed). Were each
	// refusal an event, refusing would cost about what serving does, and an
	// overloaded server would fall behind its input by as much either way.
	refused     *event.Event
	refusedSlot event.Slot
	refusedLast bool // the last frame handled went into refused

	// shed: the frames being consumed came in a read that waited too long
	// (see shedder): SHAKE and CHAT are answered "overloaded" at once.
	shed bool

	chat chatRate // every connection's CHAT rate (Options.ChatRate)

	// What becomes of a connection's frames, chosen once by newProc:
	// published into the rings (publish, admit, fatal), or in Bare mode
	// answered by the ingress itself (compare_bare.go).
	frame    func(p *proc, ic *iconn, f proto.Frame, now int64) result                 // a well-formed frame
	loggedIn func(p *proc, c *conn.Conn, f proto.Frame, user uint32, now int64) result // a LOGIN that passed its checks
	cutOff   func(p *proc, c *conn.Conn, code uint8) result                            // a violation after LOGIN
}

// consume handles the complete frames at the start of data, which arrived
// (or were decoded) at now, and returns how many bytes it used and why it
// stopped. data[used:] must be kept when the result is resMore (a partial
// frame) or resStall (frames to retry). Frame bodies alias data, and every
// event gets copies, so data may be reused once consume returns.
func (p *proc) consume(ic *iconn, data []byte, now int64) (used int, r result) {
	defer p.publishRefused()
	for {
		f, n, err := proto.NextRequest(data[used:])
		if err != nil {
			return used, p.violation(ic, err.(*proto.Violation).Code)
		}
		if n == 0 {
			return used, resMore
		}
		p.refusedLast = false
		if r = p.frame(p, ic, f, now); r == resStall {
			return used, r
		}
		if !p.refusedLast {
			// A batch holds consecutive refusals only, so that in the ring
			// (and on the wire) its answers keep their place among the
			// answers to the frames around them.
			p.publishRefused()
		}
		used += n
		p.cnt[cFramesIn+int(f.Type)]++
		if r != resMore {
			return used, r
		}
	}
}

// publish handles one well-formed frame for ic: after LOGIN, as an event in
// the ring of the SET that owns its work. It is the decode→publish path of
// the server, and allocates nothing.
func (p *proc) publish(ic *iconn, f proto.Frame, now int64) result {
	c := &ic.c
	if c.User == 0 {
		return p.login(c, f, now)
	}
	if door := p.bus.Door(); door != 0 { // fenced or stalled: refused at the door
		if door&event.DoorFenced != 0 && f.Type != proto.Ping && f.Type != proto.Login {
			return p.sendAway(c)
		}
		if door&event.DoorStalled != 0 && (f.Type == proto.Shake || f.Type == proto.Open || f.Type == proto.Send) {
			var env uint64
			if f.Type == proto.Open {
				env = f.Open()
			}
			return p.overload(c, f, now, env, 0)
		}
	}
	switch f.Type {
	case proto.Login:
		return p.fatal(c, proto.ErrCodeMalformed)
	case proto.Shake:
		if p.shed {
			return p.refuse(c, f, now, 0)
		}
		s, ok := p.bus.ClaimRequest(int(c.SET))
		if !ok {
			return p.overload(c, f, now, 0, 0)
		}
		ev := s.Event()
		*ev = event.Event{Kind: event.KShake, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now}
		ev.SetReq(f.RequestID())
		s.Publish()
	case proto.Open:
		env := f.Open()
		set := envelope.OwnerSET(env)
		if set < 0 || set >= p.bus.Sets() { // no SET owns it: answer here
			s, ok := p.bus.ClaimAnswer(int(c.SET))
			if !ok {
				return resStall
			}
			ev := s.Event()
			*ev = event.Event{Kind: event.KAnswer, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now, Env: env}
			ev.SetFrame(proto.AppendOpenResult(ev.Out[:0], f.Stamp, proto.OpenNoSuch, env, 0))
			s.Publish()
			return resMore
		}
		// Its user's SET leaving for another gateway: the answer would
		// find the connection gone (ERROR 9). Retry there.
		if p.bus.Leaving(int(c.SET)) {
			return p.overload(c, f, now, env, 0)
		}
		s, ok := p.bus.ClaimRequest(set)
		if !ok {
			return p.overload(c, f, now, env, 0)
		}
		ev := s.Event()
		*ev = event.Event{Kind: event.KOpen, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now, Env: env}
		ev.SetReq(f.RequestID())
		s.Publish()
	case proto.Send:
		total, n := f.Send()
		s, ok := p.bus.ClaimRequest(int(c.SET))
		if !ok {
			return p.overload(c, f, now, 0, 0)
		}
		b := bytebufferpool.Get() // the split stage puts it back
		b.B = slices.Grow(b.B[:0], 4*n)
		for i := range n {
			b.B = be.AppendUint32(b.B, f.SendRecipient(i))
		}
		ev := s.Event()
		*ev = event.Event{Kind: event.KSend, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now,
			Total: total, N: uint16(n), Buf: b}
		ev.SetReq(f.RequestID())
		s.Publish()
	case proto.Chat:
		to, text := f.Chat()
		tat, ok := p.chat.take(c.ChatTAT, now)
		if !ok {
			return p.limited(c, f, now, to)
		}
		if p.shed {
			return p.refuse(c, f, now, to)
		}
		if p.bus.Leaving(int(c.SET)) { // as for OPEN
			return p.overload(c, f, now, 0, to)
		}
		s, ok := p.bus.ClaimRequest(p.bus.SETOf(to))
		if !ok {
			return p.overload(c, f, now, 0, to)
		}
		c.ChatTAT = tat           // only a CHAT that goes on to its SET takes a token
		b := bytebufferpool.Get() // the recipient's egress writes it as is and puts it back
		b.B = proto.AppendChatDeliver(b.B[:0], f.Stamp, c.User, text)
		*s.Event() = event.Event{Kind: event.KChat, User: c.User, Peer: to, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now, Buf: b}
		s.Publish()
	case proto.Ping:
		s, ok := p.bus.ClaimAnswer(int(c.SET))
		if !ok {
			return resStall
		}
		ev := s.Event()
		*ev = event.Event{Kind: event.KPing, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now}
		ev.SetFrame(proto.AppendPong(ev.Out[:0], f.Stamp))
		s.Publish()
	default:
		panic("BUG: ingress: NextRequest returned a frame of type " + f.Type.String())
	}
	return resMore
}

// login handles the first frame of a connection.
func (p *proc) login(c *conn.Conn, f proto.Frame, now int64) result {
	if f.Type != proto.Login {
		p.cnt[cLoginRejected]++
		p.out = proto.AppendError(p.out, f.Stamp, proto.ErrCodeNotLoggedIn)
		return resClose
	}
	user, token := f.Login()
	if user == 0 {
		p.cnt[cLoginRejected]++
		p.out = proto.AppendLoginAck(p.out, f.Stamp, proto.LoginInvalidUser, user)
		return resClose
	}
	if p.secret && !p.verify(user, token, now) {
		p.cnt[cLoginRejected]++
		p.out = proto.AppendLoginAck(p.out, f.Stamp, proto.LoginBadToken, user)
		return resClose
	}
	return p.loggedIn(p, c, f, user, now)
}

// admit publishes the KLogin of a LOGIN that passed its checks into the
// user's SET, or redirects the user to the gateway that runs it.
func (p *proc) admit(c *conn.Conn, f proto.Frame, user uint32, now int64) result {
	set := p.bus.SETOf(user)
	if fenced := p.bus.Fenced(); fenced || !p.bus.IsLocal(set) { // another gateway of the cluster runs the user's SET, or may
		p.cnt[cLoginRejected]++
		addr := ""
		if p.redirect != nil && !fenced {
			addr = p.redirect(set)
		}
		p.out = proto.AppendLoginRedirect(p.out, f.Stamp, user, addr)
		return resClose
	}
	s, ok := p.bus.ClaimAnswer(set)
	if !ok {
		return resStall // retried whole, token check included: rare, and keeps no state
	}
	c.User, c.SET = user, int32(set)
	*s.Event() = event.Event{Kind: event.KLogin, Status: proto.LoginOK, User: user, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now}
	p.cnt[cLogins]++
	s.Publish() // the SET's egress is now c's writer: it answers LOGIN_ACK 0
	return resMore
}

func (p *proc) verify(user uint32, token []byte, now int64) bool {
	v := p.ver
	if v == nil {
		v = p.verPool.Get().(*proto.Verifier)
		defer p.verPool.Put(v)
	}
	return v.Verify(user, token, now/1e9)
}

// violation handles bytes that can never become a frame.
func (p *proc) violation(ic *iconn, code uint8) result {
	c := &ic.c
	if c.User == 0 {
		return p.closeWith(code)
	}
	return p.cutOff(p, c, code)
}

// closeWith ends a connection the ingress owns with ERROR code, stamp 0
// (docs/PROTOCOL.md, Stamps on ERROR).
func (p *proc) closeWith(code uint8) result {
	p.cnt[cViolations]++
	p.out = proto.AppendError(p.out, 0, code)
	return resClose
}

// fatal asks c's SET to send ERROR code, stamp 0 (docs/PROTOCOL.md, Stamps
// on ERROR), and cut c off.
func (p *proc) fatal(c *conn.Conn, code uint8) result {
	s, ok := p.bus.ClaimAnswer(int(c.SET))
	if !ok {
		return resStall
	}
	p.cnt[cViolations]++
	*s.Event() = event.Event{Kind: event.KFatal, Code: code, User: c.User, Conn: conn.HandleOf(c)}
	s.Publish()
	return resFatal
}

// sendAway tells c ERROR 9 and cuts it off: its gateway is fenced, so the
// SET of its user may run elsewhere by now (event.Bus.SetFenced). The
// answers made before it are written first; the request is not carried out.
func (p *proc) sendAway(c *conn.Conn) result {
	s, ok := p.bus.ClaimAnswer(int(c.SET))
	if !ok {
		return resStall
	}
	p.cnt[cSentAway]++
	*s.Event() = event.Event{Kind: event.KFatal, Code: proto.ErrCodeMoved, User: c.User, Conn: conn.HandleOf(c)}
	s.Publish()
	return resFatal
}

// overload answers a request that ClaimRequest refused "overloaded", in the
// open batch of refusals, or in a new one claimed in c's own SET with a claim
// that only fails when the ring is completely full. A frame that is not
// refused closes the batch (consume), so a connection's answers from its own
// SET leave in the order of its requests.
func (p *proc) overload(c *conn.Conn, f proto.Frame, now int64, env uint64, to uint32) result {
	r := p.answerNow(c, f, now, overloadStatus[f.Type], env, to)
	if r == resMore {
		p.cnt[cOverload+int(f.Type)]++
	}
	return r
}

// limited answers a CHAT over its connection's rate CHAT_ACK 3, in the batch
// of refusals: it reaches no SET, so a flood of them costs what a flood
// refused "overloaded" does.
func (p *proc) limited(c *conn.Conn, f proto.Frame, now int64, to uint32) result {
	r := p.answerNow(c, f, now, proto.ChatLimited, 0, to)
	if r == resMore {
		p.cnt[cChatLimited]++
	}
	return r
}

// answerNow appends the answer with status to f to the open batch of
// refusals (see overload), opening one if needed.
func (p *proc) answerNow(c *conn.Conn, f proto.Frame, now int64, status uint8, env uint64, to uint32) result {
	if p.refused == nil {
		s, ok := p.bus.ClaimAnswer(int(c.SET))
		if !ok {
			return resStall
		}
		b := bytebufferpool.Get() // the egress writes it as is and puts it back
		b.B = b.B[:0]
		p.refused, p.refusedSlot = s.Event(), s
		*p.refused = event.Event{Kind: event.KAnswer, User: c.User, Conn: conn.HandleOf(c), Stamp: f.Stamp, RecvNs: now, Buf: b}
	}
	b := p.refused.Buf
	b.B = appendStatus(b.B, f.Type, f.Stamp, status, env, to)
	p.refusedLast = true
	return resMore
}

// refuse answers a SHAKE or CHAT (to: its recipient) "overloaded" because
// it waited too long to be read: the same batched answer as for a full ring,
// counted as shed too. Only SHAKE and CHAT are shed: OPEN and SEND move money
// a client was promised (an ENVELOPE push) or chose to give, are few (paced
// by campaigns and per-user limits), and a client that sees them refused must
// redo a step of a conversation, where a refused SHAKE or CHAT is just asked
// again; they wait their turn, in a queue the shed SHAKEs keep short.
func (p *proc) refuse(c *conn.Conn, f proto.Frame, now int64, to uint32) result {
	r := p.overload(c, f, now, 0, to)
	if r == resMore {
		p.cnt[cShed+int(f.Type)]++
	}
	return r
}

// publishRefused publishes the open batch of refusals, if any.
func (p *proc) publishRefused() {
	if p.refused != nil {
		p.refused = nil
		p.refusedSlot.Publish()
	}
}

// overloadStatus is the status of an "overloaded" answer, by request type.
var overloadStatus = [proto.Ping + 1]uint8{
	proto.Shake: proto.ShakeOverloaded, proto.Open: proto.OpenOverloaded,
	proto.Send: proto.SendOverloaded, proto.Chat: proto.ChatOverloaded,
}

// appendStatus appends the answer with status to a SHAKE, OPEN, SEND or CHAT.
func appendStatus(dst []byte, t proto.Type, stamp uint64, status uint8, env uint64, to uint32) []byte {
	switch t {
	case proto.Shake:
		return proto.AppendShakeResult(dst, stamp, status, 0, 0)
	case proto.Open:
		return proto.AppendOpenResult(dst, stamp, status, env, 0)
	case proto.Send:
		return proto.AppendSendAck(dst, stamp, status, 0)
	case proto.Chat:
		return proto.AppendChatAck(dst, stamp, status, to)
	}
	panic("BUG: ingress: no status answer for " + t.String())
}
