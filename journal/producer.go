package journal

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// Producer is one appender's stream into the journal: a byte ring that its
// one goroutine fills and the writer empties. Positions are the stream's
// byte offsets since the journal started, so that "durable up to pos" is one
// atomic load (Durable), and a waiter needs nothing but the position its
// Append returned.
//
// A Producer belongs to one goroutine: Append and Publish are not safe for
// concurrent use. The nil Producer (the journal off) appends nothing and
// reports every position durable.
type Producer struct {
	j       *Journal
	g       *group
	id      uint16
	buf     []byte // nil until its group first opens, with a sink
	mask    uint64
	room    uint64 // the ring's bytes while its group may append (0: none yet)
	tail    uint64 // appended; owned by the producer's goroutine
	scratch []byte

	_       [64]byte
	pub     atomic.Uint64 // published to the writer: whole records up to here
	_       [56]byte
	durable atomic.Uint64 // written and synced: the ring is free up to here
	// floor: no position at or under it becomes durable (0 but after its
	// group's Reopen, which drops what was appended before).
	floor atomic.Uint64
	_     [48]byte

	mark [2]markAt // its last durable snapshot marks, newest first (under j.mu; with a sink)
}

// Producer registers a new producer in the cluster group (ClusterGroup);
// all are registered before Start.
func (j *Journal) Producer() *Producer { return j.ProducerIn(ClusterGroup) }

// ProducerIn registers a new producer in group (a SET's index, or
// ClusterGroup); all are registered before Start. Without a sink groups
// change nothing: every producer's records share each round. With one, the
// producer's ring is allocated when its group first opens (Reopen): until
// then it costs nothing and drops what it is given.
func (j *Journal) ProducerIn(group int) *Producer {
	if len(j.producers) >= 1<<16 || uint64(len(j.producers)+1)*uint64(j.o.RingBytes) > math.MaxUint32-RoundHeaderLen {
		panic("BUG: journal: more than 65,536 producers, or their rings past a round's 4 GiB")
	}
	if j.running.Load() {
		panic("BUG: journal: a producer registered after Start")
	}
	g := j.groupOf(group)
	p := &Producer{j: j, g: g, id: uint16(len(j.producers)), mask: uint64(j.o.RingBytes - 1), scratch: make([]byte, 0, 512)}
	if j.o.Sink == nil {
		p.buf, p.room = make([]byte, j.o.RingBytes), uint64(j.o.RingBytes)
	}
	g.producers = append(g.producers, p)
	j.producers = append(j.producers, p)
	j.marks = append(j.marks, 0)
	return p
}

// Producers is how many producers are registered.
func (j *Journal) Producers() int { return len(j.producers) }

// ID is the producer's id, written in each of its records.
func (p *Producer) ID() uint16 { return p.id }

// Append adds one record to the producer's stream and returns the position
// just past it: the record is durable once Durable(pos). It allocates
// nothing. It waits only when the ring is full, that is when the disk is
// behind by a whole ring; once the journal has failed it drops the record
// and returns a position that never becomes durable.
func (p *Producer) Append(typ uint8, payload []byte) uint64 {
	if p == nil {
		return 0
	}
	n := uint64(Size(len(payload)))
	if n > uint64(p.j.o.RingBytes) || len(payload) > MaxPayload {
		panic("BUG: journal: record larger than the producer's ring")
	}
	for spins := 0; p.tail+n-p.durable.Load() > p.room; spins++ {
		if p.Failed() {
			// Past anything the writer will mark durable; under the
			// floor a Reopen sets.
			return p.tail + n
		}
		p.Publish()
		if spins < 16 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond) // the disk is a ring behind: a round takes milliseconds
		}
	}
	p.scratch = AppendRecord(p.scratch[:0], typ, p.id, payload)
	at := p.tail & p.mask
	c := copy(p.buf[at:], p.scratch)
	copy(p.buf, p.scratch[c:])
	p.tail += n
	return p.tail
}

// Pos is the position past the last record appended, or 0 (nothing to wait
// for) while nothing was appended since its group last opened: the state
// its stage holds then came from the sink, durable already.
func (p *Producer) Pos() uint64 {
	if p == nil || p.tail == p.floor.Load() {
		return 0
	}
	return p.tail
}

// Publish hands the records appended so far to the writer: once per batch,
// so that a batch's records go to disk in one round.
func (p *Producer) Publish() {
	if p == nil || p.pub.Load() == p.tail {
		return
	}
	p.pub.Store(p.tail)
	p.j.kick()
}

// Durable tells whether the records up to pos are on disk (with a sink:
// acknowledged). Any goroutine may ask. A position handed out before its
// group's last Reopen is never durable.
func (p *Producer) Durable(pos uint64) bool {
	// durable before floor: a Reopen stores the floor first, so that an
	// old position is never taken for durable against the new durable.
	return p == nil || pos == 0 || p.durable.Load() >= pos && pos > p.floor.Load()
}

// Wait blocks until the records up to pos are on disk, or the journal fails
// (its error). For callers off the hot path: the admin API's campaign
// changes.
func (p *Producer) Wait(pos uint64) error {
	if p == nil {
		return nil
	}
	p.Publish()
	return p.j.Wait(p.id, pos)
}

// Failed tells whether the journal failed or, with a sink, the producer's
// group is not open (fenced, failed, or not opened here): nothing appended
// will become durable, so money may not be handed out. False for the nil
// Producer.
func (p *Producer) Failed() bool {
	return p != nil && (p.j.failed.Load() || p.g.state.Load() != groupOpen)
}

// Group is the group the producer belongs to.
func (p *Producer) Group() int { return p.g.id }

// gather appends the ring's bytes from position from to pub to b.
func (p *Producer) gather(b []byte, from, pub uint64) []byte {
	lo, hi := from&p.mask, pub&p.mask
	if pub-from == uint64(len(p.buf)) || hi <= lo {
		b = append(b, p.buf[lo:]...)
		return append(b, p.buf[:hi]...)
	}
	return append(b, p.buf[lo:hi]...)
}
