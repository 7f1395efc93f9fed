package stages

import (
	"encoding/binary"
	"math"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// Session is the first stage of a SET: it owns the table of the SET's online
// users. It answers LOGIN (replacing an older connection of the same user),
// forgets users on disconnect, resolves the recipient of a chat or a push to
// a connection, and picks the recipients of system envelopes. A push to a
// user who is offline it keeps (pending) until the user logs in.
type Session struct {
	set     int
	bus     *event.Bus
	out     *event.Outbox
	c       *ledger.SessionCounters
	users   map[uint32]int32 // user → index in online
	online  []onlineUser
	rnd     envelope.Rand
	pend    pending
	backlog uint32 // Limits.ChatBacklog; 0: none
}

type onlineUser struct {
	user uint32
	h    conn.Handle
}

// NewSession returns the session stage of SET set; lim bounds the pushes it
// keeps for offline users.
func NewSession(set int, bus *event.Bus, l *ledger.Ledger, lim Limits, seed uint64) *Session {
	return &Session{set: set, bus: bus, out: event.NewOutbox(bus, set), c: &l.Session,
		users: make(map[uint32]int32), rnd: envelope.NewRand(seed), pend: newPending(lim, &l.Session),
		backlog: uint32(min(max(lim.ChatBacklog, 0), math.MaxUint32))}
}

// Handle implements ring.Handler.
func (s *Session) Handle(b event.Batch) {
	s.out.Retry()
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		switch ev.Kind {
		case event.KLogin:
			s.login(ev)
		case event.KDisconnect, event.KCutOff:
			if i, ok := s.users[ev.User]; ok && s.online[i].h == ev.Conn {
				s.remove(ev.User, i)
			}
		case event.KChat:
			s.chat(ev)
		case event.KPush:
			s.push(ev)
		case event.KSystemSend:
			s.pick(ev)
		case event.KSnapshot: // the kept pushes, for the split stage's part
			ev.Buf = bytebufferpool.Get()
			ev.Buf.B = s.pend.appendTo(ev.Buf.B[:0])
		}
	}
}

// push resolves the recipient of an ENVELOPE push to its connection, or
// keeps the push for the recipient's next login: it is offline, or the
// connection egress could not write it to is the one still known.
func (s *Session) push(ev *event.Event) {
	h := s.lookup(ev.User)
	if ev.Status == event.PushUndelivered {
		s.c.PushesUndelivered.Add(1)
		ev.Status = 0
		if h.C != nil && h != ev.Conn { // logged in again since: push it there
			ev.Conn = h
			return
		}
		ev.Conn, ev.OutLen = conn.Handle{}, 0 // already counted dropped by egress
		s.pend.keep(ev.User, ev.Env)
		ev.Code = markKept
		return
	}
	s.c.Pushes.Add(1)
	if ev.Conn = h; h.C == nil {
		s.c.PushesOffline.Add(1)
		s.pend.keep(ev.User, ev.Env)
		ev.Code = markKept
	}
}

// repush sends each push kept for user, who has just logged in, back to its
// envelope's SET, which pushes it again if user can still open it, and
// reports whether there was one.
func (s *Session) repush(user uint32) bool {
	any := false
	s.pend.take(user, func(env uint64) {
		any = true
		set := envelope.OwnerSET(env)
		if set < 0 || set >= s.bus.Sets() {
			return
		}
		r := s.out.Put(set)
		r.Kind, r.User, r.Env = event.KRepush, user, env
		s.out.Done()
	})
	return any
}

func (s *Session) lookup(user uint32) conn.Handle {
	if i, ok := s.users[user]; ok {
		return s.online[i].h
	}
	return conn.Handle{}
}

func (s *Session) login(ev *event.Event) {
	s.c.Logins.Add(1)
	if i, ok := s.users[ev.User]; ok {
		if old := s.online[i].h; old != ev.Conn {
			ev.Conn2 = old // egress: ERROR 5 to the older connection, then cut it off
			s.c.Replaced.Add(1)
		}
		s.online[i].h = ev.Conn
	} else {
		s.users[ev.User] = int32(len(s.online))
		s.online = append(s.online, onlineUser{user: ev.User, h: ev.Conn})
		s.c.Online.Add(1)
	}
	ev.SetFrame(proto.AppendLoginAck(ev.Out[:0], ev.Stamp, proto.LoginOK, ev.User))
	if s.repush(ev.User) {
		ev.Code = markTaken
	}
}

func (s *Session) remove(user uint32, i int32) {
	last := int32(len(s.online) - 1)
	if i != last {
		s.online[i] = s.online[last]
		s.users[s.online[i].user] = i
	}
	s.online[last] = onlineUser{}
	s.online = s.online[:last]
	delete(s.users, user)
	s.c.Online.Add(-1)
}

// chat resolves the recipient (this SET owns it) and acknowledges the sender,
// whose connection may live in another SET. A recipient whose backlog is
// full does not get it: the egress of this SET, its connection's writer,
// would otherwise cut it off for output it never asked for.
func (s *Session) chat(ev *event.Event) {
	s.c.ChatReceived.Add(1)
	status := proto.ChatHanded
	ev.Conn2 = s.lookup(ev.Peer)
	n := 0
	if ev.Buf != nil {
		n = len(ev.Buf.B)
	}
	switch c := ev.Conn2.C; {
	case c == nil:
		status = proto.ChatOffline
		s.c.ChatOffline.Add(1)
	case s.backlog != 0 && uint64(c.ChatBacklog())+uint64(n) > uint64(s.backlog):
		ev.Conn2 = conn.Handle{}
		status = proto.ChatOverloaded
		s.c.ChatDropped.Add(1)
	default:
		c.ChatQueued += uint32(n)
		s.c.ChatDelivered.Add(1)
	}
	Answer(s.bus, s.out, s.set, ev, func(dst []byte) []byte {
		return proto.AppendChatAck(dst, ev.Stamp, status, ev.Peer)
	})
}

// pick chooses ev.N distinct online users of this SET as the recipients of a
// system envelope and writes them into ev.Buf for the split stage; with fewer
// than N online it sets N to 0 and the split stage skips the envelope.
func (s *Session) pick(ev *event.Event) {
	n := int(ev.N)
	if n == 0 || n > len(s.online) {
		ev.N = 0
		s.c.SystemPicksFailed.Add(1)
		return
	}
	s.c.SystemPicks.Add(1)
	buf := bytebufferpool.Get()
	// Selection sampling (Knuth's algorithm S): n distinct users, each online
	// user equally likely, in one pass over at most all of them.
	need, left := n, len(s.online)
	for i := 0; need > 0; i++ {
		if s.rnd.Uint64n(uint64(left)) < uint64(need) {
			buf.B = binary.BigEndian.AppendUint32(buf.B, s.online[i].user)
			need--
		}
		left--
	}
	ev.Buf = buf
}

// Answer encodes an answer to ev's requester with enc and routes it: into
// ev.Out when the requester's connection belongs to this SET (the egress
// downstream writes it), else through out as a KAnswer to the requester's SET.
func Answer(bus *event.Bus, out *event.Outbox, set int, ev *event.Event, enc func(dst []byte) []byte) {
	home := bus.SETOf(ev.User) // requests carry their requester in User
	if home == set {
		ev.SetFrame(enc(ev.Out[:0]))
		return
	}
	a := out.Put(home)
	a.Kind, a.User, a.Conn, a.Stamp, a.RecvNs = event.KAnswer, ev.User, ev.Conn, ev.Stamp, ev.RecvNs
	a.JPID, a.JPos = ev.JPID, ev.JPos
	a.SetFrame(enc(a.Out[:0]))
	out.Done()
}
