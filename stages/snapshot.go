package stages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// Part is one stage's state for a snapshot, taken on its own goroutine at a
// KSnapshot: Pos is the position of the stage's journal mark, so the
// snapshot may be kept once Pos is durable, and a replay from it takes the
// stage's records after the mark.
type Part struct {
	ID   uint64 // the snapshot it belongs to: a late part of one given up is not taken for the next's
	PID  uint16
	Pos  uint64
	Data []byte
}

// Dealt is what a stage dealt for one campaign: envelopes and their amounts
// (send: totals).
type Dealt struct{ N, Amount uint64 }

// tallies are the campaigns' progress as a stage saw it: in its snapshot
// and rebuilt by its replay, so that whoever runs the SET next resumes each
// share from exactly what was durably dealt. Only running shares need
// theirs: a snapshot folds the tally of each campaign whose share had ended
// (its end holds what it dealt) into the entry of campaign 0 (prune), which
// keeps only the sum.
type tallies map[uint32]*Dealt

// prune folds the tallies of the campaigns in ended (n × campaign id u32
// BE, from the KSnapshot event) into the entry of campaign 0.
func (t tallies) prune(ended []byte) {
	for ; len(ended) >= 4; ended = ended[4:] {
		id := binary.BigEndian.Uint32(ended)
		d := t[id]
		if id == 0 || d == nil {
			continue
		}
		t.fold(d.N, d.Amount)
		delete(t, id)
	}
}

// fold adds n envelopes of amount fen to the entry of campaign 0: dealt by
// campaigns whose tallies were pruned.
func (t tallies) fold(n, amount uint64) {
	d := t[0]
	if d == nil {
		d = new(Dealt)
		t[0] = d
	}
	d.N += n
	d.Amount += amount
}

func (t tallies) add(campaign uint32, n, amount uint64) {
	if campaign == 0 {
		return // dealt by no campaign (tests)
	}
	d := t[campaign]
	if d == nil {
		d = new(Dealt)
		t[campaign] = d
	}
	d.N += n
	d.Amount += amount
}

func (t tallies) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(t)))
	for _, id := range slices.Sorted(maps.Keys(t)) {
		b = binary.BigEndian.AppendUint32(b, id)
		b = binary.BigEndian.AppendUint64(b, t[id].N)
		b = binary.BigEndian.AppendUint64(b, t[id].Amount)
	}
	return b
}

func (t tallies) load(r *reader) {
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		id, dn, amount := r.u32(), r.u64(), r.u64()
		if id == 0 {
			t.fold(dn, amount)
		} else {
			t.add(id, dn, amount)
		}
	}
}

// reader decodes a snapshot part; its first error sticks.
type reader struct {
	b   []byte
	err error
}

var errShortPart = errors.New("stages: snapshot part cut short")

func (r *reader) take(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = errShortPart
		return make([]byte, n)
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.BigEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("stages: %d bytes after the snapshot part", len(r.b))
	}
	return r.err
}

// appendCounters appends the counters' values.
func appendCounters(b []byte, cs []*atomic.Uint64) []byte {
	for _, c := range cs {
		b = binary.BigEndian.AppendUint64(b, c.Load())
	}
	return b
}

// counters reads as many values as cs has, to store once the whole part is
// read.
func (r *reader) counters(cs []*atomic.Uint64) []uint64 {
	vs := make([]uint64, len(cs))
	for i := range vs {
		vs[i] = r.u64()
	}
	return vs
}

func store(cs []*atomic.Uint64, vs []uint64) {
	for i, c := range cs {
		c.Store(vs[i])
	}
}

// snapshotted are the shake counters a snapshot keeps: the money, not the
// traffic.
func (s *Shake) snapshotted() []*atomic.Uint64 {
	c := s.c
	return []*atomic.Uint64{&c.Created, &c.CreatedAmount, &c.Popped, &c.PoppedAmount, &c.Returned, &c.ReturnedAmount}
}

// snapshotted are the split counters a snapshot keeps (live and held are
// the envelopes'): the money, not the traffic.
func (s *Split) snapshotted() []*atomic.Uint64 {
	c := s.c
	return []*atomic.Uint64{&c.Created, &c.CreatedAmount, &c.Opened, &c.OpenedAmount, &c.Refunded, &c.RefundedAmount}
}

// Tallies is what the stage dealt for each campaign (campaign 0: the sum of
// those pruned), with the last shake envelope id it was dealt; read it only
// while the SET is stopped.
func (s *Shake) Tallies() (map[uint32]*Dealt, uint64) { return s.camps, s.lastDealt }

// Snapshots makes the stage hand its state to out at every KSnapshot.
func (s *Shake) Snapshots(out func(Part)) { s.snapOut = out }

// snapshot hands the stage's state in for snapshot ev.Env, and appends to
// ev.Buf (the session's kept pushes), for the split stage downstream, the
// campaigns whose shares ended: both prune their tallies, which the shares'
// ends hold.
func (s *Shake) snapshot(ev *event.Event) {
	if s.snapOut == nil || s.jp == nil {
		return
	}
	id := ev.Env
	if ev.Buf == nil { // no session upstream: an empty list of kept pushes
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B[:0], 0)
	}
	at := len(ev.Buf.B)
	ev.Buf.B = s.shares.appendEnded(ev.Buf.B)
	s.camps.prune(ev.Buf.B[at:])
	b := appendCounters(make([]byte, 0, 64+12*s.pool.Len()), s.snapshotted())
	b = binary.BigEndian.AppendUint64(b, s.lastDealt)
	b = s.camps.append(b)
	b = binary.BigEndian.AppendUint64(b, uint64(s.pool.Len()))
	s.pool.Each(func(id uint64, amount uint32) {
		b = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(b, id), amount)
	})
	b = s.ans.appendTo(b)
	b = s.shares.appendTo(b)
	pos := s.jp.Mark(id)
	s.jp.Publish()
	s.snapOut(Part{ID: id, PID: s.jp.ID(), Pos: pos, Data: b})
}

// Load restores the stage from its part of a snapshot, before any Restore;
// egress is the SET's egress counters (got is popped less returned).
func (s *Shake) Load(data []byte, egress *ledger.EgressCounters) error {
	r := &reader{b: data}
	vs := r.counters(s.snapshotted())
	s.lastDealt = r.u64()
	s.camps.load(r)
	for n := r.u64(); n > 0 && r.err == nil; n-- {
		id, amount := r.u64(), r.u32()
		if r.err == nil && (amount == 0 || id>>63 != 1) {
			return fmt.Errorf("stages: shake snapshot envelope %#x of %d fen: not a shake envelope: %w", id, amount, errRecord)
		}
		s.pool.Push(id, amount)
	}
	if len(r.b) > 0 { // absent from an earlier version's part
		if err := s.ans.loadOrSkip(r); err != nil {
			return err
		}
	}
	if len(r.b) > 0 { // likewise
		if err := s.shares.load(r); err != nil {
			return err
		}
	}
	if err := r.done(); err != nil {
		return err
	}
	store(s.snapshotted(), vs)
	c := s.c
	egress.Got.Store(c.Popped.Load() - c.Returned.Load())
	egress.GotAmount.Store(c.PoppedAmount.Load() - c.ReturnedAmount.Load())
	s.gauges()
	// A part read from a store the loader does not trust must balance: every
	// fen created is got or in the pool.
	if got, gotAmount := egress.Got.Load(), egress.GotAmount.Load(); c.Popped.Load() < c.Returned.Load() || c.PoppedAmount.Load() < c.ReturnedAmount.Load() ||
		c.Created.Load() != got+c.Pool.Load() || c.CreatedAmount.Load() != gotAmount+c.PoolAmount.Load() {
		return fmt.Errorf("stages: a shake snapshot that does not balance: created %d (%d fen), popped %d (%d fen), returned %d (%d fen), pool %d (%d fen): %w",
			c.Created.Load(), c.CreatedAmount.Load(), c.Popped.Load(), c.PoppedAmount.Load(), c.Returned.Load(), c.ReturnedAmount.Load(), c.Pool.Load(), c.PoolAmount.Load(), errRecord)
	}
	return nil
}

// Tallies is what the stage dealt for each campaign (campaign 0: the sum of
// those pruned); read it only while the SET is stopped.
func (s *Split) Tallies() map[uint32]*Dealt { return s.camps }

// Snapshots makes the stage hand its state to out at every KSnapshot.
func (s *Split) Snapshots(out func(Part)) { s.snapOut = out }

// snapshot hands the stage's state in for snapshot id; buf holds the
// session's kept pushes, which its part carries, then the campaigns whose
// shares ended (the shake stage's), whose tallies it prunes.
func (s *Split) snapshot(id uint64, buf *bytebufferpool.ByteBuffer) {
	var kept []byte
	if buf != nil {
		if n := pendingLen(buf.B); n >= 0 {
			kept = buf.B[:n]
			s.camps.prune(buf.B[n:])
		}
	}
	if s.snapOut == nil || s.jp == nil {
		return
	}
	b := appendCounters(make([]byte, 0, 64+64*len(s.groups)), s.snapshotted())
	b = binary.BigEndian.AppendUint64(b, s.ids.Peek())
	b = s.camps.append(b)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.groups)))
	n := 0
	for _, e := range s.expiry { // creation order; every envelope held is in it once
		g := s.groups[e.id]
		if g == nil || g.expires != e.expires {
			continue
		}
		n++
		b = binary.BigEndian.AppendUint64(b, e.id)
		b = binary.BigEndian.AppendUint32(b, g.sender)
		b = binary.BigEndian.AppendUint32(b, g.total)
		b = binary.BigEndian.AppendUint64(b, uint64(g.expires))
		b = binary.BigEndian.AppendUint16(b, uint16(len(g.recipients)))
		for i, r := range g.recipients {
			b = binary.BigEndian.AppendUint32(b, r)
			b = binary.BigEndian.AppendUint32(b, g.shares[i])
		}
	}
	if n != len(s.groups) {
		panic(fmt.Sprintf("BUG: stages: %d group envelopes held, %d in the expiry queue", len(s.groups), n))
	}
	b = binary.BigEndian.AppendUint32(b, answersTag)
	b = s.ans.appendTo(b)
	if kept != nil {
		b = binary.BigEndian.AppendUint32(b, keptTag)
		b = append(b, kept...)
	}
	pos := s.jp.Mark(id)
	s.jp.Publish()
	s.snapOut(Part{ID: id, PID: s.jp.ID(), Pos: pos, Data: b})
}

// Load restores the stage from its part of a snapshot, before any Restore;
// now is the recovery's time.
func (s *Split) Load(data []byte, now int64) error {
	s.at = now
	r := &reader{b: data}
	vs, next := r.counters(s.snapshotted()), r.u64()
	s.camps.load(r)
	rcpt := make([]byte, 0, 4*256)
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		id, sender, total, expires, k := r.u64(), r.u32(), r.u32(), int64(r.u64()), int(r.u16())
		rcpt = rcpt[:0]
		shares := make([]uint32, k)
		for i := range k {
			rcpt = binary.BigEndian.AppendUint32(rcpt, r.u32())
			shares[i] = r.u32()
		}
		if r.err != nil {
			break
		}
		if err := s.checkPart(id, sender, total, rcpt, shares); err != nil {
			return err
		}
		g := s.add(id, sender, total, expires, rcpt)
		for i, share := range shares {
			if share == 0 {
				continue
			}
			g.shares[i] = share
			g.remaining -= share
			g.sharesLeft--
			s.c.LiveAmount.Add(^uint64(share - 1))
		}
		if g.sharesLeft == 0 {
			s.setLive(g, -1)
			g.retained = now + int64(s.limits.Retain)
			s.spent = append(s.spent, expiring{id, g.retained})
		}
	}
	switch {
	case len(r.b) >= 4 && binary.BigEndian.Uint32(r.b) == answersTag:
		r.u32()
		if err := s.ans.loadOrSkip(r); err != nil {
			return err
		}
		if len(r.b) >= 4 && binary.BigEndian.Uint32(r.b) == keptTag {
			r.u32()
			n := pendingLen(r.b)
			if n < 0 {
				return fmt.Errorf("stages: a split part's kept pushes cut short: %w", errRecord)
			}
			s.kept = r.take(n)
		}
	case len(r.b) > 0: // an earlier version's part: its crossings
		skipCrossed(r)
	}
	if err := r.done(); err != nil {
		return err
	}
	s.ids.After(next - 1)
	store(s.snapshotted(), vs) // after the envelopes' own counting: these are the totals
	s.c.Queued.Store(int64(len(s.expiry) + len(s.spent)))
	// A part read from a store the loader does not trust must balance: every
	// fen created is opened, refunded, or in an envelope held.
	if c := s.c; c.CreatedAmount.Load() != c.OpenedAmount.Load()+c.RefundedAmount.Load()+c.LiveAmount.Load() {
		return fmt.Errorf("stages: a split snapshot that does not balance: created %d fen, opened %d, refunded %d, live %d: %w",
			c.CreatedAmount.Load(), c.OpenedAmount.Load(), c.RefundedAmount.Load(), c.LiveAmount.Load(), errRecord)
	}
	return nil
}

// checkPart refuses an envelope of a snapshot part that this SET could not
// have made: another SET's id, one held twice, no recipient, a recipient 0,
// the sender or twice, shares that add up to more than the total or leave
// less than a fen for each share left.
func (s *Split) checkPart(id uint64, sender, total uint32, rcpt []byte, shares []uint32) error {
	bad := func(why string) error {
		return fmt.Errorf("stages: snapshot envelope %#x: %s: %w", id, why, errRecord)
	}
	switch {
	case envelope.OwnerSET(id) != s.set || id>>63 != 0:
		return bad(fmt.Sprintf("not an envelope of SET %d", s.set))
	case s.groups[id] != nil:
		return bad("held twice")
	case len(shares) == 0 || len(shares) > (proto.MaxFrameLen-18)/4: // what a SEND frame holds
		return bad(fmt.Sprintf("%d recipients", len(shares)))
	}
	for i := 0; i < len(rcpt); i += 4 {
		u := binary.BigEndian.Uint32(rcpt[i:])
		if u == 0 || u == sender {
			return bad(fmt.Sprintf("recipient %d", u))
		}
		for j := 0; j < i; j += 4 {
			if binary.BigEndian.Uint32(rcpt[j:]) == u {
				return bad(fmt.Sprintf("recipient %d twice", u))
			}
		}
	}
	drawn, left := uint64(0), uint64(0)
	for _, sh := range shares {
		if sh == 0 {
			left++
		}
		drawn += uint64(sh)
	}
	if drawn > uint64(total) || uint64(total)-drawn < left || left == 0 && drawn != uint64(total) {
		return bad(fmt.Sprintf("shares of %d fen drawn, %d left, of a total of %d", drawn, left, total))
	}
	return nil
}

// keptTag starts the session's kept pushes in a split part, after the
// answers.
const keptTag = 0x6b657074 // "kept"

// Kept is the session's kept pushes a loaded part held (Session.LoadPending),
// nil for none.
func (s *Split) Kept() []byte { return s.kept }

// answersTag starts the answers kept for request ids in a split part, where
// an earlier version's part had its crossings (a count that never comes
// near it).
const answersTag = 0xffff_ffff

// skipCrossed reads past the crossings an earlier version kept after the
// envelopes (which crossings told each share, to take shares back at a
// cancel): nothing takes a share back now.
func skipCrossed(r *reader) {
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		r.u64()
		r.u32()
		for range r.u16() {
			r.u32()
		}
	}
}
