package stages

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
)

// DefaultPendingPerUser is how many ENVELOPE pushes are kept for one offline
// recipient: the newest. A user who has been sent more while away can still
// open the older ones by id if it learns them otherwise; 64 covers any
// human's backlog while one hostile sender cannot make a victim's login
// carry an unbounded burst of pushes.
const DefaultPendingPerUser = 64

// defaultPendingTotal bounds a SET's kept pushes when no envelope budget
// does (Limits.MaxEnvelopes 0): 1 Mi pushes, 16 MiB.
const defaultPendingTotal = 1 << 20

// pending is the ENVELOPE pushes a SET's session keeps for users who were
// offline when their envelope was created, owned by the session stage: it
// alone knows who is online. It keeps only envelope ids: at the user's login
// each goes back to its envelope's SET, whose split stage pushes it again
// only if the user can still open it, with the frame of the first push.
//
// Bounded twice: per user the newest perUser pushes are kept; in all, a ring
// of at most total slots (16 bytes each, grown as needed) where the oldest
// push is dropped for a new one. A push lives in the ring until its user
// logs in, or until it is dropped: never past total newer pushes. Dropping
// is counted; expired or opened envelopes' pushes just wait to be dropped or
// found stale at login (the split stage checks), so the ring needs no clock.
type pending struct {
	ring    []pendingPush
	next    int // the slot to write once the ring is full: its oldest
	total   int
	perUser int
	users   map[uint32]pendingUser
	c       *ledger.SessionCounters
}

// pendingPush is one kept push: user 0 marks a slot whose push was
// delivered or dropped.
type pendingPush struct {
	env  uint64
	user uint32
	next int32 // the slot of the same user's next newer push; -1: none
}

// pendingUser is the chain of one user's kept pushes through the ring,
// oldest first. A user's pushes enter the ring in order, so the oldest push
// of the ring is always the head of its user's chain.
type pendingUser struct {
	head, tail int32
	n          uint16
}

func newPending(lim Limits, c *ledger.SessionCounters) pending {
	p := pending{perUser: lim.PendingPerUser, total: defaultPendingTotal, users: make(map[uint32]pendingUser), c: c}
	if p.perUser <= 0 {
		p.perUser = DefaultPendingPerUser
	}
	if lim.MaxEnvelopes > 0 {
		// A kept push names an envelope its user has not opened (it has not
		// logged in since): of the live ones, the budget allows MaxShares
		// pushes each, spread over the recipients' SETs. The rest are of
		// expired envelopes, the oldest, which go first.
		p.total = min(lim.MaxEnvelopes*max(int(lim.MaxShares), 1), math.MaxInt32) // slots are int32
	}
	return p
}

// keep records a push of env for user, who is offline.
func (p *pending) keep(user uint32, env uint64) {
	slot := p.slot()
	u, ok := p.users[user] // after slot: making room may have shortened this chain
	if ok && int(u.n) >= p.perUser {
		h := &p.ring[u.head]
		h.user = 0
		u.head = h.next
		u.n--
		p.dropped()
	}
	p.ring[slot] = pendingPush{env: env, user: user, next: -1}
	if !ok || u.n == 0 {
		if !ok {
			p.c.PendingUsers.Add(1)
		}
		u.head = slot
	} else {
		p.ring[u.tail].next = slot
	}
	u.tail = slot
	u.n++
	p.users[user] = u
	p.c.PendingPushes.Add(1)
}

// slot returns a free slot of the ring, dropping its oldest push if full.
func (p *pending) slot() int32 {
	if len(p.ring) < p.total {
		p.ring = append(p.ring, pendingPush{})
		return int32(len(p.ring) - 1)
	}
	i := p.next
	p.next = (i + 1) % p.total
	if e := p.ring[i]; e.user != 0 {
		u := p.users[e.user]
		u.head = e.next
		u.n--
		p.set(e.user, u)
		p.dropped()
	}
	return int32(i)
}

func (p *pending) dropped() {
	p.c.PendingPushes.Add(-1)
	p.c.PendingDropped.Add(1)
}

// set stores u as user's chain, or forgets user once it is empty.
func (p *pending) set(user uint32, u pendingUser) {
	if u.n > 0 {
		p.users[user] = u
		return
	}
	delete(p.users, user)
	p.c.PendingUsers.Add(-1)
}

// take calls f with each push kept for user, oldest first, and forgets them.
func (p *pending) take(user uint32, f func(env uint64)) {
	u, ok := p.users[user]
	if !ok {
		return
	}
	for i, k := u.head, uint16(0); k < u.n; k++ {
		e := &p.ring[i]
		f(e.env)
		e.user = 0
		i = e.next
	}
	p.c.PendingPushes.Add(-int64(u.n))
	p.c.PendingRechecked.Add(uint64(u.n))
	u.n = 0
	p.set(user, u)
}

// The kept pushes are the SET's state: the split stage journals each change
// on the session's behalf (the session writes no journal), in the order the
// SET's events made them, and carries the session's list in its snapshot
// part, so that a restart, a move or a failover keeps them.
const (
	RecKeep uint8 = 17 // split: user u32, envelope u64 (a push kept for user, offline)
	RecTake uint8 = 18 // split: user u32 (user logged in: its kept pushes went back to their envelopes' SETs)
)

// The marks the session leaves in an event's Code for the split stage
// downstream: a KPush it kept, a KLogin that took the user's kept pushes.
const (
	markKept  uint8 = 1
	markTaken uint8 = 1
)

// appendTo appends the kept pushes, oldest first: n u32, then n × (user
// u32, envelope u64).
func (p *pending) appendTo(b []byte) []byte {
	at := len(b)
	b = binary.BigEndian.AppendUint32(b, 0)
	n := uint32(0)
	each := func(e pendingPush) {
		if e.user != 0 {
			b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(b, e.user), e.env)
			n++
		}
	}
	if len(p.ring) < p.total { // not yet wrapped: slot order is age order
		for _, e := range p.ring {
			each(e)
		}
	} else {
		for i := range p.ring {
			each(p.ring[(p.next+i)%len(p.ring)])
		}
	}
	binary.BigEndian.PutUint32(b[at:], n)
	return b
}

// pendingLen is the length of a list appendTo wrote at the start of b, or
// -1 when b is too short for it.
func pendingLen(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	n := 4 + 12*int(binary.BigEndian.Uint32(b))
	if n > len(b) {
		return -1
	}
	return n
}

// load keeps the pushes of a list appendTo wrote, in its order.
func (p *pending) load(b []byte) error {
	if pendingLen(b) != len(b) {
		return fmt.Errorf("stages: a list of kept pushes of %d bytes: %w", len(b), errRecord)
	}
	for b = b[4:]; len(b) > 0; b = b[12:] {
		user := binary.BigEndian.Uint32(b)
		if user == 0 {
			return fmt.Errorf("stages: a push kept for user 0: %w", errRecord)
		}
		p.keep(user, binary.BigEndian.Uint64(b[4:]))
	}
	return nil
}

// Restore replays one of the records the split stage journalled for the
// session (RecKeep, RecTake), before the SET runs.
func (s *Session) Restore(r journal.Record) error {
	p := r.Payload
	switch {
	case r.Type == RecKeep && len(p) == 12 && binary.BigEndian.Uint32(p) != 0:
		s.pend.keep(binary.BigEndian.Uint32(p), binary.BigEndian.Uint64(p[4:]))
	case r.Type == RecTake && len(p) == 4:
		s.pend.take(binary.BigEndian.Uint32(p), func(uint64) {}) // sent back then: the user was online
	default:
		return recordError(r, "not a kept push's record")
	}
	return nil
}

// LoadPending restores the kept pushes from the list a snapshot holds
// (Split.Pending), before any Restore.
func (s *Session) LoadPending(b []byte) error { return s.pend.load(b) }
