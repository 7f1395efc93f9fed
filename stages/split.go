package stages

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// Limits are the SEND limits of PROTOCOL.md, server flags.
type Limits struct {
	MaxShares uint16        // most recipients of one envelope (default 100)
	MaxTotal  uint32        // largest total in fen (default 20000)
	TTL       time.Duration // a group envelope not fully opened by then expires (default 24h)
	// Retain is how long a fully opened envelope is kept, so that a repeated
	// OPEN still answers "already opened" with its share; then it is
	// forgotten (OPEN answers "no such envelope", as after the TTL). Without
	// it a server handing out 200 group envelopes a second would hold every
	// one of them for the whole TTL. 0: TTL.
	Retain time.Duration

	// What one client may make the server hold. A SEND past any of them is
	// answered SEND_ACK 3 (limited). 0: no limit.
	SendRate     float64 // SENDs a second a user may make, on average (the refill of its token bucket)
	SendBurst    int     // SENDs a user may make at once (its bucket's size); 0: 1 when SendRate is set
	MaxLive      int     // live group envelopes (not fully opened, not expired) a user may have sent
	MaxEnvelopes int     // live group envelopes of this SET, users' and system ones: its share of the server's budget
	// PendingPerUser is how many ENVELOPE pushes are kept for a recipient
	// who is offline, the newest; 0: DefaultPendingPerUser.
	PendingPerUser int
	// ChatBacklog: a CHAT whose CHAT_DELIVER would take its recipient's
	// unwritten output (conn.Conn.ChatBacklog) past this many bytes is not
	// delivered, and answered CHAT_ACK 2, so that chats alone never get a
	// recipient cut off. 0: no limit.
	ChatBacklog int
	// RequestWindow is how long the first money answer to a request id is
	// kept for a retry with the same id (docs/PROTOCOL.md, Request ids);
	// 0: DefaultRequestWindow; negative: ids are not kept, every request is
	// served as new.
	RequestWindow time.Duration
}

// window is the request window l asks for, in whole seconds.
func (l Limits) window() time.Duration {
	switch {
	case l.RequestWindow == 0:
		return DefaultRequestWindow
	case l.RequestWindow < 0:
		return 0
	}
	return max(l.RequestWindow, time.Second)
}

// group is one group envelope, owned by the split stage of its SET. Its
// creation time, the stamp of its ENVELOPE pushes, is expires − TTL.
type group struct {
	sender     uint32
	total      uint32
	remaining  uint32
	sharesLeft uint16
	expires    int64
	retained   int64    // the end of the retention of its latest full opening: the spent entry that may forget it
	recipients []uint32 // with shares, one array: recipients at its start (its capacity is the whole array's)
	shares     []uint32 // recipients[i]'s share; 0 until opened
}

// Split is the stage that owns a SET's group envelopes: it creates them
// (SEND, system sends), pushes ENVELOPE to every recipient through the
// recipient's SET, draws each share at OPEN time with the double-mean rule,
// and expires envelopes after their TTL, refunding the remainder.
//
// It also owns the SEND limits of the users of its SET: a SEND is made in
// the sender's SET and its envelope lives there (the id names the SET), so
// the stage that creates, opens and expires a user's envelopes is the only
// one that sees its SENDs and its live envelopes change: one map, no locks.
type Split struct {
	set     int
	bus     *event.Bus
	out     *event.Outbox
	c       *ledger.SplitCounters
	limits  Limits
	now     func() int64
	ids     envelope.IDGen
	rnd     envelope.Rand
	groups  map[uint64]*group
	at      int64      // unix ns: the time of the batch being handled
	live    int        // envelopes of groups not fully opened and not expired
	expiry  []expiring // in creation order: TTLs are equal, so also in expiry order
	spent   []expiring // fully opened, in that order: retentions are equal, so also in forgetting order
	free    []*group   // forgotten groups, for reuse (newGroup)
	senders senders
	jp      *journal.Producer // nil: the journal is off
	rec     []byte            // a record's payload, reused
	camps   tallies           // created (or skipped) for each send campaign
	ans     answers           // SEND and OPEN money answers to request ids, for their retries
	snapOut func(Part)
	kept    []byte // the session's kept pushes, as a loaded part held them
}

type expiring struct {
	id      uint64
	expires int64
}

// NewSplit returns the split stage of SET set. now gives unix ns.
func NewSplit(set int, bus *event.Bus, l *ledger.Ledger, lim Limits, now func() int64, seed uint64) (*Split, error) {
	ids, err := envelope.NewGroupIDGen(set, now())
	if err != nil {
		return nil, err
	}
	if lim.Retain <= 0 || lim.Retain > lim.TTL {
		lim.Retain = lim.TTL
	}
	return &Split{set: set, bus: bus, out: event.NewOutbox(bus, set), c: &l.Split, limits: lim,
		now: now, ids: ids, rnd: envelope.NewRand(seed), groups: make(map[uint64]*group),
		senders: newSenders(lim, &l.Split), camps: tallies{}, ans: newAnswers(lim.window(), &l.Split.RequestIDs)}, nil
}

// Handle implements ring.Handler.
func (s *Split) Handle(b event.Batch) {
	s.out.Retry()
	now := s.now()
	s.at = now
	s.expire(now)
	s.senders.evict(now)
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		switch ev.Kind {
		case event.KSend:
			s.send(ev, now)
		case event.KSystemSend:
			created := false
			if ev.N > 0 && !s.jp.Failed() {
				if s.room(now) {
					s.create(0, ev.Peer, ev.Total, ev.Buf.B[:4*int(ev.N)], now, 0)
					created = true
				} else {
					s.c.SystemOverBudget.Add(1)
				}
			}
			s.camps.add(ev.Peer, 1, uint64(ev.Total))
			if !created && s.jp != nil { // the campaign's progress: dealt, though not created
				s.rec = binary.BigEndian.AppendUint32(s.rec[:0], ev.Peer)
				s.jp.Append(RecSkip, binary.BigEndian.AppendUint32(s.rec, ev.Total))
			}
			s.release(ev)
		case event.KPush:
			if ev.Code == markKept && s.jp != nil {
				s.rec = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(s.rec[:0], ev.User), ev.Env)
				s.jp.Append(RecKeep, s.rec)
			}
		case event.KLogin:
			if ev.Code == markTaken && s.jp != nil {
				s.jp.Append(RecTake, binary.BigEndian.AppendUint32(s.rec[:0], ev.User))
			}
		case event.KOpen:
			s.open(ev, now)
		case event.KRepush:
			s.repush(ev.Env, ev.User)
		case event.KSnapshot:
			s.snapshot(ev.Env, ev.Buf)
			if ev.Buf != nil {
				bytebufferpool.Put(ev.Buf)
				ev.Buf = nil
			}
		}
	}
	s.c.Queued.Store(int64(len(s.expiry) + len(s.spent)))
	s.jp.Publish()
}

// Journal makes the stage journal its changes to jp; nil leaves it off.
func (s *Split) Journal(jp *journal.Producer) {
	s.jp, s.rec = jp, make([]byte, 0, 32+4*int(max(s.limits.MaxShares, 100)))
}

func (s *Split) release(ev *event.Event) {
	if ev.Buf != nil {
		bytebufferpool.Put(ev.Buf)
		ev.Buf = nil
	}
}

func (s *Split) send(ev *event.Event, now int64) {
	defer s.release(ev)
	req := ev.Req()
	if req != 0 && s.replayed(ev, req, proto.Send) {
		return
	}
	rcpt := ev.Buf.B[:4*int(ev.N)]
	if !s.valid(ev.User, ev.Total, rcpt) {
		s.c.SendInvalid.Add(1)
		ev.SetFrame(proto.AppendSendAck(ev.Out[:0], ev.Stamp, proto.SendInvalid, 0))
		return
	}
	if s.jp.Failed() { // nothing would become durable: create nothing, charge nothing
		ev.SetFrame(proto.AppendSendAck(ev.Out[:0], ev.Stamp, proto.SendOverloaded, 0))
		return
	}
	if limited := s.limited(ev.User, now); limited != nil {
		limited.Add(1)
		ev.SetFrame(proto.AppendSendAck(ev.Out[:0], ev.Stamp, proto.SendLimited, 0))
		return
	}
	id := s.create(ev.User, 0, ev.Total, rcpt, now, req)
	s.gate(ev)
	ev.SetFrame(proto.AppendSendAck(ev.Out[:0], ev.Stamp, proto.SendOK, id))
}

// replayed answers a SEND or OPEN (typ) with request id req from the
// answers kept, if its id is outside the window or has an answer, and
// reports whether it did. The repeated answer waits, as the first did, until
// what the stage journalled is durable.
func (s *Split) replayed(ev *event.Event, req uint64, typ proto.Type) bool {
	if !s.ans.on() {
		return false
	}
	replays, expired := &s.c.SendReplayed, &s.c.SendExpired
	if typ == proto.Open {
		replays, expired = &s.c.OpenReplayed, &s.c.OpenExpired
	}
	e := s.ans.get(ev.User, req)
	var a answer
	switch {
	case s.ans.outside(req, ev.RecvNs/1e9) || e != nil && (e.typ != typ || typ == proto.Open && e.env != ev.Env):
		// Too old or too far ahead, or the id named another request.
		a.status = proto.SendExpired
		if typ == proto.Open {
			a.status, a.env = proto.OpenExpired, ev.Env
		}
		expired.Add(1)
	case e != nil:
		a = *e
		replays.Add(1)
		s.gate(ev)
	default:
		return false
	}
	if typ == proto.Send {
		ev.SetFrame(proto.AppendSendAck(ev.Out[:0], ev.Stamp, a.status, a.env))
		return true
	}
	Answer(s.bus, s.out, s.set, ev, func(dst []byte) []byte {
		return proto.AppendOpenResult(dst, ev.Stamp, a.status, a.env, a.amount)
	})
	return true
}

// keep records the money answer a to user's request req, for its retries.
func (s *Split) keep(a answer) {
	if s.ans.on() {
		s.ans.put(a, s.at/1e9)
	}
}

// limited returns the counter of the first limit a valid SEND from sender
// hits — its rate, its live envelopes, the SET's budget — or nil, having
// charged the sender's bucket. A refused SEND costs the sender nothing: it
// made the server hold nothing.
func (s *Split) limited(sender uint32, now int64) *atomic.Uint64 {
	switch {
	case !s.senders.allowed(sender, now):
		return &s.c.SendLimitedRate
	case s.limits.MaxLive > 0 && s.senders.live(sender) >= s.limits.MaxLive:
		return &s.c.SendLimitedLive
	case !s.room(now):
		return &s.c.SendLimitedBudget
	}
	s.senders.charge(sender, now)
	return nil
}

// room reports whether the SET may create one more envelope: it has fewer
// live ones than its budget. Envelopes held past their last share (kept for
// a repeated OPEN) are forgotten early to make room, oldest first, so that
// the envelopes in memory, not only the live ones, stay within the budget;
// but only once their last share was drawn spentGrace ago: until then an
// opener whose answer was lost may still OPEN again to learn its share.
// Without such an envelope the SET has no room.
func (s *Split) room(now int64) bool {
	budget := s.limits.MaxEnvelopes
	if budget <= 0 {
		return true
	}
	if s.live >= budget {
		return false
	}
	i := 0
	for ; len(s.groups) >= budget && i < len(s.spent); i++ {
		e := s.spent[i]
		if e.expires-int64(s.limits.Retain)+int64(spentGrace) > now {
			break // the oldest is too young: so are the rest
		}
		// Fewer live than held: some envelope is fully opened, so the queue
		// of fully opened ones names it.
		if g := s.groups[e.id]; g != nil && g.sharesLeft == 0 && g.retained == e.expires {
			s.forget(e.id, RecForget)
			s.c.Evicted.Add(1)
		}
	}
	s.spent = dropHead(s.spent, i)
	return len(s.groups) < budget
}

// spentGrace is how long a fully opened envelope is kept at least, budget or
// not: long enough for an opener whose answer was lost (its connection
// dropped, a crossing timed out) to reconnect and OPEN again, which answers
// "already" with its share.
const spentGrace = 10 * time.Second

// valid applies PROTOCOL.md's SEND rules: 1 ≤ n ≤ MaxShares, n ≤ total ≤
// MaxTotal, recipients distinct, none of them 0 or the sender.
func (s *Split) valid(sender, total uint32, rcpt []byte) bool {
	n := len(rcpt) / 4
	if n < 1 || n > int(s.limits.MaxShares) || total < uint32(n) || total > s.limits.MaxTotal {
		return false
	}
	for i := 0; i < n; i++ {
		u := binary.BigEndian.Uint32(rcpt[4*i:])
		if u == 0 || u == sender {
			return false
		}
		for j := 0; j < i; j++ { // n ≤ 100: quadratic is cheaper than a set
			if binary.BigEndian.Uint32(rcpt[4*j:]) == u {
				return false
			}
		}
	}
	return true
}

// create records a group envelope and pushes ENVELOPE to each recipient
// through the recipient's SET.
// A user's SEND with request id req (0: none) keeps its answer in the same
// record.
func (s *Split) create(sender, campaign, total uint32, rcpt []byte, now int64, req uint64) uint64 {
	id := s.ids.Next()
	expires := now + int64(s.limits.TTL)
	keep := req != 0 && s.ans.on()
	if s.jp != nil {
		b, typ := s.rec[:0], RecCreate
		if keep {
			b, typ = binary.BigEndian.AppendUint64(b, req), RecCreateReq
		}
		b = binary.BigEndian.AppendUint64(b, id)
		b = binary.BigEndian.AppendUint32(b, campaign)
		b = binary.BigEndian.AppendUint32(b, sender)
		b = binary.BigEndian.AppendUint32(b, total)
		b = binary.BigEndian.AppendUint64(b, uint64(expires))
		s.rec = append(b, rcpt...)
		s.jp.Append(typ, s.rec)
	}
	if keep {
		s.keep(answer{req: req, env: id, user: sender, typ: proto.Send, status: proto.SendOK})
	}
	g := s.add(id, sender, total, expires, rcpt)
	for _, r := range g.recipients {
		s.push(r, id, g, uint64(now))
	}
	return id
}

// gate makes ev's answer wait until everything the stage journalled so far
// is durable.
func (s *Split) gate(ev *event.Event) {
	if s.jp != nil {
		ev.JPID, ev.JPos = s.jp.ID(), s.jp.Pos()
	}
}

// add holds a new group envelope and counts it.
func (s *Split) add(id uint64, sender, total uint32, expires int64, rcpt []byte) *group {
	n := len(rcpt) / 4
	g := s.newGroup(n)
	g.sender, g.total, g.remaining, g.sharesLeft, g.expires = sender, total, total, uint16(n), expires
	for i := range g.recipients {
		g.recipients[i] = binary.BigEndian.Uint32(rcpt[4*i:])
	}
	s.groups[id] = g
	s.c.Held.Add(1)
	s.expiry = append(s.expiry, expiring{id, g.expires})
	s.c.Created.Add(1)
	s.c.CreatedAmount.Add(uint64(total))
	s.setLive(g, 1)
	s.c.LiveAmount.Add(uint64(total))
	return g
}

// push sends the ENVELOPE of g (id) to user through the user's SET, whose
// session writes it or keeps it for the user's next login.
func (s *Split) push(user uint32, id uint64, g *group, stamp uint64) {
	p := s.out.Put(s.bus.SETOf(user))
	p.Kind, p.User, p.Env = event.KPush, user, id
	s.gate(p)
	p.SetFrame(proto.AppendEnvelope(p.Out[:0], stamp, id, g.sender, g.total, uint16(len(g.recipients))))
	s.out.Done()
}

// setLive counts g, by its sender too, as live again (delta 1) or no longer
// live (delta −1).
func (s *Split) setLive(g *group, delta int) {
	s.live += delta
	s.c.Live.Add(uint64(int64(delta)))
	if g.sender != 0 {
		s.senders.addLive(g.sender, delta, s.at)
	}
}

// repush pushes the ENVELOPE of id again to user, who was offline when it
// was created and has logged in, if user may still open it: the envelope is
// not expired, has shares left, and user is a recipient who has not opened
// it. The stamp is the creation time, as in the first push.
func (s *Split) repush(id uint64, user uint32) {
	g := s.groups[id]
	if g == nil || g.sharesLeft == 0 {
		s.c.RepushStale.Add(1)
		return
	}
	for i, r := range g.recipients {
		if r == user {
			if g.shares[i] != 0 {
				break
			}
			s.push(user, id, g, uint64(g.expires-int64(s.limits.TTL)))
			s.c.Repushed.Add(1)
			return
		}
	}
	s.c.RepushStale.Add(1)
}

func (s *Split) open(ev *event.Event, now int64) {
	req := ev.Req()
	if req != 0 && s.replayed(ev, req, proto.Open) {
		return
	}
	status, share := proto.OpenOverloaded, uint32(0)
	if !s.jp.Failed() { // else nothing would become durable: open nothing
		status, share = s.draw(ev.Env, ev.User, now)
	}
	s.c.OpenStatus[status].Add(1)
	keep := status == proto.OpenOK && req != 0 && s.ans.on()
	if keep {
		s.keep(answer{req: req, env: ev.Env, user: ev.User, amount: share, typ: proto.Open, status: proto.OpenOK})
	}
	switch {
	case s.jp == nil:
	case keep:
		s.rec = binary.BigEndian.AppendUint64(appendID(s.rec[:0], ev.Env, ev.User, share), req)
		s.jp.Append(RecDrawReq, s.rec)
		s.gate(ev)
	case status == proto.OpenOK:
		s.jp.Append(RecDraw, appendID(s.rec[:0], ev.Env, ev.User, share))
		s.gate(ev) // Answer carries it to the requester's SET
	case status == proto.OpenAlready:
		// It tells the share too: not before the draw it repeats is durable
		// (a second OPEN right behind the first would otherwise overtake it).
		s.gate(ev)
	}
	Answer(s.bus, s.out, s.set, ev, func(dst []byte) []byte {
		return proto.AppendOpenResult(dst, ev.Stamp, status, ev.Env, share)
	})
}

// draw opens envelope id for user: the OPEN_RESULT status and share.
func (s *Split) draw(id uint64, user uint32, now int64) (uint8, uint32) {
	g := s.groups[id]
	if g == nil {
		return proto.OpenNoSuch, 0
	}
	i := -1
	for j, r := range g.recipients {
		if r == user {
			i = j
			break
		}
	}
	switch {
	case i < 0:
		return proto.OpenNotRecipient, 0
	case g.shares[i] != 0:
		return proto.OpenAlready, g.shares[i]
	case g.sharesLeft == 0:
		return proto.OpenNoShares, 0
	}
	share := uint32(envelope.DrawShare(&s.rnd, uint64(g.remaining), uint32(g.sharesLeft)))
	g.shares[i] = share
	g.remaining -= share
	g.sharesLeft--
	s.c.Opened.Add(1)
	s.c.OpenedAmount.Add(uint64(share))
	s.c.LiveAmount.Add(^uint64(share - 1)) // −share
	if g.sharesLeft == 0 {
		s.setLive(g, -1)
		// Kept a while, so that a second OPEN still answers "already".
		g.retained = now + int64(s.limits.Retain)
		s.spent = append(s.spent, expiring{id, g.retained})
	}
	return proto.OpenOK, share
}

// undraw takes back user's share of envelope g (id), at its index i: the
// replay of a take-back journalled by an earlier version, which gave back
// shares whose answer never reached the user. Nothing takes a share back
// now: once drawn it is the user's, and a repeated OPEN tells it.
func (s *Split) undraw(g *group, i int) {
	amount := g.shares[i]
	if g.sharesLeft == 0 {
		s.setLive(g, 1) // openable again; a retention already queued passes it by (expire)
	}
	g.shares[i] = 0
	g.remaining += amount
	g.sharesLeft++
	s.c.Opened.Add(^uint64(0))
	s.c.OpenedAmount.Add(^uint64(amount - 1))
	s.c.LiveAmount.Add(uint64(amount))
}

// expire drops envelopes past their TTL, refunding what was not opened, and
// forgets fully opened ones past their retention.
func (s *Split) expire(now int64) {
	i := 0
	for ; i < len(s.expiry) && s.expiry[i].expires <= now; i++ {
		id := s.expiry[i].id
		g := s.groups[id]
		if g == nil { // fully opened and already forgotten
			continue
		}
		if g.sharesLeft > 0 {
			s.refund(g)
			s.forget(id, RecRefund)
		} else {
			s.forget(id, RecForget)
		}
	}
	s.expiry = dropHead(s.expiry, i)
	i = 0
	for ; i < len(s.spent) && s.spent[i].expires <= now; i++ {
		// Not if its TTL came first, nor if a share was taken back: then it
		// is live again, and its TTL (or the entry of its next full opening,
		// the one its retained names) ends it.
		if g := s.groups[s.spent[i].id]; g != nil && g.sharesLeft == 0 && g.retained == s.spent[i].expires {
			s.forget(s.spent[i].id, RecForget)
		}
	}
	s.spent = dropHead(s.spent, i)
	// The TTL queue keeps the ids of forgotten envelopes until their TTL: an
	// envelope never fully opened at its head holds back the ones behind it.
	// Drop them once they are over half the queue, so that it stays within
	// twice the envelopes held (amortised O(1) per envelope).
	if len(s.expiry) > 1024 && len(s.expiry) > 2*len(s.groups) {
		s.expiry = slices.DeleteFunc(s.expiry, func(e expiring) bool { return s.groups[e.id] == nil })
	}
}

func (s *Split) refund(g *group) {
	s.c.Refunded.Add(1)
	s.c.RefundedAmount.Add(uint64(g.remaining))
	s.setLive(g, -1)
	s.c.LiveAmount.Add(^uint64(g.remaining - 1))
}

// forget drops envelope id, journalled as rec (RecForget, or RecRefund once
// refunded).
func (s *Split) forget(id uint64, rec uint8) {
	if s.jp != nil {
		s.jp.Append(rec, binary.BigEndian.AppendUint64(s.rec[:0], id))
	}
	if len(s.free) < freeGroups {
		s.free = append(s.free, s.groups[id])
	}
	delete(s.groups, id)
	s.c.Held.Add(-1)
}

// freeGroups is how many forgotten groups a split stage keeps for reuse: as
// many as a SET creates and forgets in a burst, so that steady traffic
// allocates nothing, and few enough (~230 KiB of 100-recipient groups) that
// a spike does not stay held once it is over.
const freeGroups = 256

// newGroup returns a group for n recipients, zeroed: a forgotten one if
// any, its recipients and shares in one array reused when large enough.
func (s *Split) newGroup(n int) *group {
	var g *group
	if k := len(s.free); k > 0 {
		g, s.free[k-1] = s.free[k-1], nil
		s.free = s.free[:k-1]
	} else {
		g = new(group)
	}
	buf := g.recipients[:cap(g.recipients)]
	if cap(buf) < 2*n {
		buf = make([]uint32, 2*n)
	}
	clear(buf[n : 2*n])
	*g = group{recipients: buf[:n], shares: buf[n : 2*n : 2*n]}
	return g
}

// dropHead removes the first n entries of q in place.
func dropHead(q []expiring, n int) []expiring {
	if n == 0 {
		return q
	}
	return q[:copy(q, q[n:])]
}

// Restore applies one of the stage's journal records at recovery, before the
// SET runs; now is the recovery's time, from which the retention of envelopes
// found fully opened is counted.
func (s *Split) Restore(r journal.Record, now int64) error {
	s.at = now
	p := r.Payload
	switch r.Type {
	case RecCreateReq: // req u64 · a RecCreate's payload
		if len(p) < 8+28 {
			return recordError(r, "create of a broken length")
		}
		req, id, sender := binary.BigEndian.Uint64(p), binary.BigEndian.Uint64(p[8:]), binary.BigEndian.Uint32(p[8+12:])
		if err := s.Restore(journal.Record{Type: RecCreate, PID: r.PID, Payload: p[8:]}, now); err != nil {
			return err
		}
		return s.restoreAnswer(r, answer{req: req, env: id, user: sender, typ: proto.Send, status: proto.SendOK})
	case RecDrawReq: // a RecDraw's payload · req u64
		if len(p) != 16+8 {
			return recordError(r, "share of a broken length")
		}
		if err := s.Restore(journal.Record{Type: RecDraw, PID: r.PID, Payload: p[:16]}, now); err != nil {
			return err
		}
		return s.restoreAnswer(r, answer{req: binary.BigEndian.Uint64(p[16:]), env: binary.BigEndian.Uint64(p),
			user: binary.BigEndian.Uint32(p[8:]), amount: binary.BigEndian.Uint32(p[12:]), typ: proto.Open, status: proto.OpenOK})
	}
	if len(p) < 8 {
		return recordError(r, "no envelope id")
	}
	id := binary.BigEndian.Uint64(p)
	if r.Type == RecSkip {
		if len(p) != 8 {
			return recordError(r, "skip of a broken length")
		}
		s.camps.add(binary.BigEndian.Uint32(p), 1, uint64(binary.BigEndian.Uint32(p[4:])))
		return nil
	}
	if r.Type == RecCreate {
		if len(p) < 28 || (len(p)-28)%4 != 0 || len(p) == 28 {
			return recordError(r, "create of a broken length")
		}
		if s.groups[id] != nil {
			return recordError(r, fmt.Sprintf("envelope %#x created twice", id))
		}
		s.ids.After(id)
		s.camps.add(binary.BigEndian.Uint32(p[8:]), 1, uint64(binary.BigEndian.Uint32(p[16:])))
		s.add(id, binary.BigEndian.Uint32(p[12:]), binary.BigEndian.Uint32(p[16:]), int64(binary.BigEndian.Uint64(p[20:])), p[28:])
		return nil
	}
	g := s.groups[id]
	if g == nil {
		return recordError(r, fmt.Sprintf("envelope %#x not held", id))
	}
	switch r.Type {
	case RecCrossing:
		// Which crossings told a share, kept by an earlier version to take
		// shares back at a cancel: nothing to restore now.
		if len(p) != 20 {
			return recordError(r, "crossing of a broken length")
		}
	case RecDraw, RecUnopen, RecDrawCrossed: // RecDrawCrossed: a draw, with its crossing (an earlier version's)
		want := 16
		if r.Type == RecDrawCrossed {
			want = 20
		}
		if len(p) != want {
			return recordError(r, "share of a broken length")
		}
		user, share := binary.BigEndian.Uint32(p[8:]), binary.BigEndian.Uint32(p[12:])
		i := slices.Index(g.recipients, user)
		switch {
		case i < 0:
			return recordError(r, fmt.Sprintf("user %d is no recipient of %#x", user, id))
		case r.Type == RecUnopen:
			if g.shares[i] != share || share == 0 {
				return recordError(r, fmt.Sprintf("share %d of %#x taken back from user %d, who has %d", share, id, user, g.shares[i]))
			}
			s.undraw(g, i)
			return nil
		case g.shares[i] != 0 || g.sharesLeft == 0 || uint32(g.sharesLeft) > g.remaining:
			return recordError(r, fmt.Sprintf("share %d of %#x drawn by user %d twice, or with none left", share, id, user))
		}
		if lo, hi := envelope.ShareRange(uint64(g.remaining), uint32(g.sharesLeft)); uint64(share) < lo || uint64(share) > hi {
			return recordError(r, fmt.Sprintf("share %d of %#x drawn by user %d outside the double-mean range [%d, %d]", share, id, user, lo, hi))
		}
		g.shares[i] = share
		g.remaining -= share
		g.sharesLeft--
		s.c.Opened.Add(1)
		s.c.OpenedAmount.Add(uint64(share))
		s.c.LiveAmount.Add(^uint64(share - 1))
		if g.sharesLeft == 0 {
			s.setLive(g, -1)
			g.retained = now + int64(s.limits.Retain)
			s.spent = append(s.spent, expiring{id, g.retained})
		}
	case RecRefund:
		if g.sharesLeft == 0 {
			return recordError(r, fmt.Sprintf("fully opened envelope %#x refunded", id))
		}
		s.refund(g)
		s.forgetRestored(id)
	case RecForget:
		if g.sharesLeft > 0 {
			s.refund(g) // forgotten at its TTL with shares left cannot be: refund is its record; keep the ledger whole anyway
		}
		s.forgetRestored(id)
	default:
		return recordError(r, "not a split record")
	}
	s.c.Queued.Store(int64(len(s.expiry) + len(s.spent)))
	return nil
}

func (s *Split) forgetRestored(id uint64) {
	jp := s.jp
	s.jp = nil // replaying: nothing to journal again
	s.forget(id, RecForget)
	s.jp = jp
}

// restoreAnswer keeps the answer a record r carried, as the stage kept it
// when it wrote r.
func (s *Split) restoreAnswer(r journal.Record, a answer) error {
	if err := s.ans.restore(a); err != nil {
		return recordError(r, err.Error())
	}
	return nil
}
