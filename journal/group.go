package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ClusterGroup is the group of the records that belong to no SET (the
// campaign runner's). A SET's group is its index.
const ClusterGroup = -1

// A Sink makes a journal's rounds durable somewhere other than its segment
// files: each group a round touched becomes one message, appended only if the
// last message of that group is the one the writer knows of, so that two
// writers of one group cannot both append (Options.Sink).
type Sink interface {
	// Commit makes each batch's Data durable as one message of its group,
	// all of them in flight at once, and returns once each batch has its Seq
	// or its Err. It runs on the writer's goroutine, once a round; Data is
	// valid until it returns. An Err that wraps ErrFenced says the group's
	// last message was not ExpectLast: another writer appended.
	Commit(batches []Batch)
	// MaxBatch is the most bytes one batch's Data may hold: Start refuses
	// groups whose producers' rings hold more.
	MaxBatch() int
}

// Batch is one group's records of a round, for a Sink.
type Batch struct {
	Group      int
	Data       []byte // whole records, each producer's in the order appended
	ExpectLast uint64 // the group's last message as the writer knows it (0: none)
	// Gen is the group's generation (RotateGroup), which a sink may keep its
	// messages apart by, so that those of a generation can be dropped whole
	// once a snapshot holds them; Compact says so with a batch of no Data,
	// Rollup set, of the generation to drop.
	Gen    uint8
	Rollup bool
	Seq    uint64 // set by Commit: the message's sequence, the group's new last
	Err    error  // set by Commit when the message was not appended, or may not have been
}

// Gens is how many generations a group's messages rotate through: the one
// written, the one before the last snapshot (which a reader a snapshot
// behind may still read), and the one a snapshot made useless, compacted.
const Gens = 3

// Errors of a group (with a sink), wrapped in a *GroupError.
var (
	// ErrFenced: another writer appended to the group, so this one lost it
	// and never appends to it again until reopened.
	ErrFenced = errors.New("journal: fenced: another writer appended to the group")
	// ErrNotOpen: the group is not open here (never opened, or released).
	ErrNotOpen = errors.New("journal: group not open here")
	// ErrReopened: the record was appended before its group's last Reopen,
	// which dropped it.
	ErrReopened = errors.New("journal: appended before its group was reopened")
)

// errSink: what only segment files do, asked of a journal with a sink (its
// snapshots and replay are the sink's).
var errSink = errors.New("journal: no segment files with a sink: its replay and snapshots are the sink's")

// GroupError is why a group's records do not become durable.
type GroupError struct {
	Group int
	Err   error
}

func (e *GroupError) Error() string {
	if e.Group == ClusterGroup {
		return fmt.Sprintf("journal: the cluster group: %v", e.Err)
	}
	return fmt.Sprintf("journal: group %d: %v", e.Group, e.Err)
}

func (e *GroupError) Unwrap() error { return e.Err }

// A group's states; without a sink every group is open.
const (
	groupClosed int32 = iota // not open here: its producers drop what they are given
	groupOpen
	groupFenced
	groupFailed
)

// group is the producers whose records share one message of a round (a
// SET's, or the cluster's), with a sink.
type group struct {
	id        int
	producers []*Producer
	state     atomic.Int32
	err       error         // why it is not open (under j.mu)
	last      uint64        // the writer's: its last message's sequence
	lastSeq   atomic.Uint64 // last, for any goroutine
	gen       uint8         // the writer's: the generation its rounds go to (RotateGroup)
	buf       []byte        // the writer's: the round's message
}

// markAt is where a snapshot mark was made durable: the message's sequence.
type markAt struct{ id, seq uint64 }

// groupOf finds or makes group id; only before Start.
func (j *Journal) groupOf(id int) *group {
	for _, g := range j.groups {
		if g.id == id {
			return g
		}
	}
	g := &group{id: id}
	if j.o.Sink == nil {
		g.state.Store(groupOpen)
	} else {
		g.err = &GroupError{Group: id, Err: ErrNotOpen}
	}
	j.groups = append(j.groups, g)
	return g
}

// findGroup is group id, or an error naming it.
func (j *Journal) findGroup(id int) (*group, error) {
	for _, g := range j.groups {
		if g.id == id {
			return g, nil
		}
	}
	return nil, &GroupError{Group: id, Err: errors.New("no producer registered in it")}
}

// groupCtl is a Reopen, a Release, a RotateGroup or a Compact, applied by the
// writer between rounds.
type groupCtl struct {
	g     *group
	op    ctlOp
	last  uint64 // ctlOpen: the group's last message
	gen   uint8  // ctlCompact: the generation to drop; ctlRotate: set to the one retired
	err   error  // set by apply
	reply chan struct{}
}

type ctlOp uint8

const (
	ctlOpen ctlOp = iota
	ctlRelease
	ctlRotate
	ctlCompact
)

// Reopen opens group (first, or again after it was fenced, failed or
// released) with lastSeq, the sequence of the group's last message as the
// caller just read it: its next message is appended only if that is still
// the last. Every producer of the group is reset: nothing appended before
// becomes durable (Wait answers ErrReopened), and what was not acknowledged
// may or may not be in the sink, so the group's state must be reloaded from
// the sink first. Call it while none of the group's producers appends (its
// SET stopped), never from a hook. Only with a sink.
func (j *Journal) Reopen(group int, lastSeq uint64) error {
	_, err := j.control(group, groupCtl{op: ctlOpen, last: lastSeq})
	return err
}

// Drain waits until everything group's producers published is durable and
// returns the group's last message in the sink: once its SET stopped (its
// ring closed) nothing more is appended, so that message is its last. An
// error if the group failed, was fenced or is not open. Only with a sink.
func (j *Journal) Drain(group int) (uint64, error) {
	if j.o.Sink == nil {
		return 0, errors.New("journal: groups drain only with a sink")
	}
	g, err := j.findGroup(group)
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		switch {
		case j.failed.Load():
			return 0, j.err
		case g.state.Load() != groupOpen:
			return 0, g.err
		}
		durable := true
		for _, p := range g.producers {
			durable = durable && p.durable.Load() >= p.pub.Load()
		}
		if durable {
			return g.lastSeq.Load(), nil
		}
		j.cond.Wait()
	}
}

// LastSeq is the sequence of group's last message in the sink, as the
// writer knows it, and whether the group is open: after Close, its last
// message for good. Only with a sink.
func (j *Journal) LastSeq(group int) (uint64, bool) {
	g, err := j.findGroup(group)
	if err != nil || j.o.Sink == nil {
		return 0, false
	}
	return g.lastSeq.Load(), g.state.Load() == groupOpen
}

// Release closes group here: its producers drop what they are given from
// now on, and what they published that is not durable yet never will be. A
// SET handed to another gateway is released once its answers are durable.
// Only with a sink; never from a hook.
func (j *Journal) Release(group int) error {
	_, err := j.control(group, groupCtl{op: ctlRelease})
	return err
}

// RotateGroup makes group's next rounds go to its next generation (Batch.Gen,
// modulo Gens), and returns the generation it retired: every message of
// that one was committed before the first of the next, so a snapshot whose
// marks are appended after it returns holds all of it. Only with a
// sink, the group open.
func (j *Journal) RotateGroup(group int) (retired uint8, err error) {
	c, err := j.control(group, groupCtl{op: ctlRotate})
	return c.gen, err
}

// Compact appends to group, after its last message, a message of no
// records that drops generation gen whole (Batch.Rollup): call it once a
// snapshot holds everything of gen. An error if the group is not open, or
// the append failed, which fails or fences the group as a round's would.
// Only with a sink.
func (j *Journal) Compact(group int, gen uint8) error {
	_, err := j.control(group, groupCtl{op: ctlCompact, gen: gen % Gens})
	return err
}

func (j *Journal) control(id int, c groupCtl) (groupCtl, error) {
	if j.o.Sink == nil {
		return c, errors.New("journal: groups open, close and rotate only with a sink")
	}
	g, err := j.findGroup(id)
	if err != nil {
		return c, err
	}
	c.g = g
	if !j.running.Load() {
		j.apply(&c)
		return c, c.err
	}
	c.reply = make(chan struct{})
	select {
	case j.ctl <- &c:
	case <-j.done:
		return c, errors.New("journal: closed")
	}
	<-c.reply
	return c, c.err
}

// apply carries out a group's control, on the writer's goroutine (or
// before it starts).
func (j *Journal) apply(c *groupCtl) {
	defer func() {
		if c.reply != nil {
			close(c.reply)
		}
	}()
	g := c.g
	switch c.op {
	case ctlRotate, ctlCompact:
		j.mu.Lock()
		open, gerr := g.state.Load() == groupOpen, g.err
		j.mu.Unlock()
		if !open {
			c.err = gerr
			return
		}
		if c.op == ctlRotate {
			c.gen = g.gen
			g.gen = (g.gen + 1) % Gens
			return
		}
		b := []Batch{{Group: g.id, ExpectLast: g.last, Gen: c.gen, Rollup: true}}
		j.o.Sink.Commit(b)
		if c.err = b[0].Err; c.err != nil {
			j.failGroup(g, c.err)
			return
		}
		g.last = b[0].Seq
		g.lastSeq.Store(b[0].Seq)
		return
	}
	open := c.op == ctlOpen
	if open {
		for _, p := range g.producers {
			if p.buf == nil {
				p.buf = make([]byte, j.o.RingBytes)
			}
			// Every position handed out so far is under the new floor,
			// those of records dropped on a full ring included (they are
			// at most a ring past the tail).
			t := p.tail + uint64(j.o.RingBytes)
			p.tail, p.room = t, uint64(len(p.buf))
			p.floor.Store(t)
			p.pub.Store(t)
			p.durable.Store(t)
		}
		g.last = c.last
		g.lastSeq.Store(c.last)
		g.gen = 0
	}
	j.mu.Lock()
	if open {
		g.err = nil
		g.state.Store(groupOpen)
	} else {
		g.err = &GroupError{Group: g.id, Err: ErrNotOpen}
		g.state.Store(groupClosed)
	}
	j.cond.Broadcast()
	j.mu.Unlock()
}

// GroupErr is why group's records do not become durable (a *GroupError:
// fenced, failed, not open here), or nil while it is open.
func (j *Journal) GroupErr(group int) error {
	g, err := j.findGroup(group)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if g.state.Load() == groupOpen {
		return nil
	}
	return g.err
}

// Lost tells whether producer pid's records up to pos will never become
// durable: the journal failed, their group is not open, or they were
// appended before its last Reopen. The egress answers a money answer so
// held as refused.
func (j *Journal) Lost(pid uint16, pos uint64) bool {
	if j == nil || pos == 0 {
		return false
	}
	p := j.producers[pid]
	if p.Durable(pos) {
		return false
	}
	return j.failed.Load() || p.g.state.Load() != groupOpen || pos <= p.floor.Load()
}

// lostErr is why producer p's position pos will never be durable, or nil;
// j.mu is held.
func (j *Journal) lostErr(p *Producer, pos uint64) error {
	switch {
	case j.failed.Load():
		return j.err
	case p.g.state.Load() != groupOpen:
		return p.g.err
	case pos <= p.floor.Load():
		return &GroupError{Group: p.g.id, Err: ErrReopened}
	}
	return nil
}

// MarkSeq is the sequence of the sink's message that holds producer pid's
// mark of snapshot id (Producer.Mark), once it is durable: a group's
// snapshot replays from the earliest message holding one of its marks. False
// when the mark is not durable, is older than the producer's last two, or
// there is no sink.
func (j *Journal) MarkSeq(pid uint16, id uint64) (uint64, bool) {
	p := j.producers[pid]
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, m := range p.mark {
		if m.seq != 0 && m.id == id {
			return m.seq, true
		}
	}
	return 0, false
}

// startSink checks that each group's round fits one message, before the
// writer starts.
func (j *Journal) startSink() error {
	max := j.o.Sink.MaxBatch()
	for _, g := range j.groups {
		if n := len(g.producers) * j.o.RingBytes; n > max {
			return &GroupError{Group: g.id, Err: fmt.Errorf("its %d producers' rings hold %d bytes, more than one message may (%d)",
				len(g.producers), n, max)}
		}
	}
	j.batches = make([]Batch, 0, len(j.groups))
	j.batchGroups = make([]*group, 0, len(j.groups))
	return nil
}

// commitSink is one round with a sink: each open group's published records
// gathered into one message, every message in flight at once, then each
// group's producers durable up to what its message held, or the group
// fenced or failed. It reports whether it published anything.
func (j *Journal) commitSink() bool {
	j.idle.Store(false)
	bs, gs := j.batches[:0], j.batchGroups[:0]
	for _, g := range j.groups {
		if g.state.Load() != groupOpen {
			continue
		}
		b := g.buf[:0]
		for _, p := range g.producers {
			pub, from := p.pub.Load(), p.durable.Load()
			j.marks[p.id] = pub
			if pub != from {
				b = p.gather(b, from, pub)
			}
		}
		g.buf = b
		if len(b) > 0 {
			bs = append(bs, Batch{Group: g.id, Data: b, ExpectLast: g.last, Gen: g.gen})
			gs = append(gs, g)
		}
	}
	j.batches, j.batchGroups = bs, gs
	if len(bs) == 0 {
		return false
	}
	j.roundStart = time.Now()
	j.o.Sink.Commit(bs)
	j.M.observe(time.Since(j.roundStart))
	j.M.Rounds.Add(1)
	durable := false
	for i := range bs {
		b, g := &bs[i], gs[i]
		if b.Err != nil {
			j.failGroup(g, b.Err)
			continue
		}
		g.last = b.Seq
		g.lastSeq.Store(b.Seq)
		for _, p := range g.producers {
			p.durable.Store(j.marks[p.id])
		}
		j.M.Records.Add(uint64(j.scanMarks(b.Data, b.Seq)))
		j.M.Bytes.Add(uint64(len(b.Data)))
		j.M.Messages.Add(1)
		durable = true
	}
	j.mu.Lock()
	j.cond.Broadcast()
	j.mu.Unlock()
	if durable && j.o.OnDurable != nil {
		j.o.OnDurable()
	}
	return true
}

// scanMarks notes each snapshot mark in a message made durable as seq (for
// MarkSeq) and returns the records it holds.
func (j *Journal) scanMarks(b []byte, seq uint64) int {
	recs := 0
	for off := 0; off+HeaderLen+bodyMin <= len(b); off += HeaderLen + int(binary.BigEndian.Uint32(b[off:])) {
		recs++
		if b[off+HeaderLen] != RecMark || binary.BigEndian.Uint32(b[off:]) != bodyMin+8 || off+HeaderLen+bodyMin+8 > len(b) {
			continue
		}
		pid := binary.BigEndian.Uint16(b[off+HeaderLen+1:])
		id := binary.BigEndian.Uint64(b[off+HeaderLen+bodyMin:])
		if int(pid) < len(j.producers) {
			p := j.producers[pid]
			j.mu.Lock()
			p.mark[1], p.mark[0] = p.mark[0], markAt{id: id, seq: seq}
			j.mu.Unlock()
		}
	}
	return recs
}

// failGroup stops group g for err: fenced when another writer appended,
// else failed. Its hook runs before its waiters wake, so that whoever a
// failed Wait answers finds it reported.
func (j *Journal) failGroup(g *group, err error) {
	ge := &GroupError{Group: g.id, Err: err}
	fenced := errors.Is(err, ErrFenced)
	j.mu.Lock()
	g.err = ge
	j.mu.Unlock()
	if fenced {
		j.M.Fenced.Add(1)
		if j.o.OnFenced != nil {
			j.o.OnFenced(g.id, ge)
		}
	} else {
		j.M.GroupFailures.Add(1)
		if j.o.OnGroupFailed != nil {
			j.o.OnGroupFailed(g.id, ge)
		}
	}
	j.mu.Lock()
	if fenced {
		g.state.Store(groupFenced)
	} else {
		g.state.Store(groupFailed)
	}
	j.cond.Broadcast()
	j.mu.Unlock()
}
