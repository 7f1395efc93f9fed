package stages

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// answers is a stage's memory of the money answers it gave to requests that
// carried a request id (docs/PROTOCOL.md, Request ids): a retry with the
// same (user, id) gets the same answer, however and wherever it reached the
// SET. An entry is journalled in the record of the money change it answers
// (RecPopReq, RecCreateReq, RecDrawReq) and written in the stage's snapshot
// part, so it moves, fails over and restarts with the SET.
//
// An entry lives while its id is inside the window: until the second the
// id names plus the window. A request whose id is outside it is refused
// (outside), never served again: so the entry of an id that can still be
// served is always here.
//
// A FIFO of entries in the order they were made, and an open-addressed
// index over it (linear probing, deletion by backward shift): about 48
// bytes per answer in the window and nothing per user; it allocates only to
// grow past the most answers it ever held. Owned by its stage's goroutine.
type answers struct {
	window int64         // seconds; 0: ids are not kept, every request is served as new
	fifo   []answer      // a ring, its length a power of two
	head   uint64        // the sequence number of the oldest entry; entry q is fifo[q&(len-1)]
	n      uint64        // entries
	index  []uint64      // q+1 of an entry, 0: free; its length a power of two, twice the ring's
	kept   *atomic.Int64 // the ledger's gauge of the answers kept, or nil
}

// answer is the money answer given to one request with an id.
type answer struct {
	req    uint64
	env    uint64
	user   uint32
	amount uint32
	typ    proto.Type // the request's
	status uint8
}

const answerLen = 8 + 8 + 4 + 4 + 1 + 1 // in a snapshot part

// gone is the status of an answer forgotten before its time (returned): it
// stays in the FIFO until its turn, found by no lookup.
const gone uint8 = 0xff

// DefaultRequestWindow is how long a request id is kept by default: past a
// failover (seconds), a move and a client's reconnect backoff, with room
// for a client that retries for minutes.
const DefaultRequestWindow = 10 * time.Minute

func newAnswers(window time.Duration, kept *atomic.Int64) answers {
	return answers{window: int64(window / time.Second), kept: kept}
}

// gauge shows the count in the ledger.
func (a *answers) gauge() {
	if a.kept != nil {
		a.kept.Store(int64(a.n))
	}
}

// on reports whether ids are kept at all.
func (a *answers) on() bool { return a.window > 0 }

// outside reports whether req's id is outside the window at unix second now:
// older than it, or further ahead than it (a client clock far off).
func (a *answers) outside(req uint64, now int64) bool {
	t := proto.RequestIDTime(req)
	return t+a.window <= now || t > now+a.window
}

func hashAnswer(user uint32, req uint64) uint64 {
	h := (req ^ uint64(user)<<17 ^ uint64(user)) * 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// get returns the answer given to user's request req, or nil.
func (a *answers) get(user uint32, req uint64) *answer {
	if a.n == 0 {
		return nil
	}
	mask := uint64(len(a.index) - 1)
	for i := hashAnswer(user, req) & mask; a.index[i] != 0; i = (i + 1) & mask {
		e := &a.fifo[(a.index[i]-1)&uint64(len(a.fifo)-1)]
		if e.user == user && e.req == req && e.status != gone {
			return e
		}
	}
	return nil
}

// put keeps e, first forgetting the entries whose ids left the window by
// unix second now (0: forget none, as a replay does). The caller has checked
// that e's request has no entry.
func (a *answers) put(e answer, now int64) {
	for now != 0 && a.n > 0 && proto.RequestIDTime(a.fifo[a.head&uint64(len(a.fifo)-1)].req)+a.window <= now {
		a.drop()
	}
	if a.n == uint64(len(a.fifo)) {
		a.grow()
	}
	q := a.head + a.n
	a.fifo[q&uint64(len(a.fifo)-1)] = e
	a.n++
	a.link(q)
	a.gauge()
}

// link enters entry q in the index.
func (a *answers) link(q uint64) {
	e := &a.fifo[q&uint64(len(a.fifo)-1)]
	mask := uint64(len(a.index) - 1)
	i := hashAnswer(e.user, e.req) & mask
	for a.index[i] != 0 {
		i = (i + 1) & mask
	}
	a.index[i] = q + 1
}

// drop forgets the oldest entry.
func (a *answers) drop() {
	q := a.head
	e := &a.fifo[q&uint64(len(a.fifo)-1)]
	mask := uint64(len(a.index) - 1)
	i := hashAnswer(e.user, e.req) & mask
	for a.index[i] != q+1 {
		i = (i + 1) & mask
	}
	// Backward shift: move up each later entry of the run whose home slot
	// is not between the hole and itself, so that no probe stops early.
	for j := i; ; {
		a.index[i] = 0
		for {
			j = (j + 1) & mask
			if a.index[j] == 0 {
				a.head++
				a.n--
				a.gauge()
				return
			}
			o := &a.fifo[(a.index[j]-1)&uint64(len(a.fifo)-1)]
			home := hashAnswer(o.user, o.req) & mask
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				a.index[i] = a.index[j]
				i = j
				break
			}
		}
	}
}

// grow doubles the ring and the index.
func (a *answers) grow() {
	size := max(64, 2*len(a.fifo))
	fifo := make([]answer, size)
	for q := a.head; q < a.head+a.n; q++ {
		fifo[q&uint64(size-1)] = a.fifo[q&uint64(len(a.fifo)-1)]
	}
	a.fifo, a.index = fifo, make([]uint64, 2*size)
	for q := a.head; q < a.head+a.n; q++ {
		a.link(q)
	}
}

// len is the number of answers kept.
func (a *answers) len() int { return int(a.n) }

// appendTo appends the entries, oldest first, for a snapshot part.
func (a *answers) appendTo(b []byte) []byte {
	at := len(b)
	b = binary.BigEndian.AppendUint32(b, 0) // the count, once known
	n := uint32(0)
	for q := a.head; q < a.head+a.n; q++ {
		e := &a.fifo[q&uint64(len(a.fifo)-1)]
		if e.status == gone {
			continue
		}
		n++
		b = binary.BigEndian.AppendUint64(b, e.req)
		b = binary.BigEndian.AppendUint64(b, e.env)
		b = binary.BigEndian.AppendUint32(b, e.user)
		b = binary.BigEndian.AppendUint32(b, e.amount)
		b = append(b, byte(e.typ), e.status)
	}
	binary.BigEndian.PutUint32(b[at:], n)
	return b
}

// load reads entries appendTo wrote.
func (a *answers) load(r *reader) error {
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		b := r.take(answerLen)
		e := answer{req: binary.BigEndian.Uint64(b), env: binary.BigEndian.Uint64(b[8:]),
			user: binary.BigEndian.Uint32(b[16:]), amount: binary.BigEndian.Uint32(b[20:]), typ: proto.Type(b[24]), status: b[25]}
		if r.err != nil {
			break
		}
		if e.req == 0 || e.user == 0 || a.get(e.user, e.req) != nil {
			return fmt.Errorf("stages: snapshot answer to user %d's request %#x: no id, no user, or twice: %w", e.user, e.req, errRecord)
		}
		a.put(e, 0)
	}
	return r.err
}

// restore keeps e, read from a journal record: an answer without an id,
// or a second one to the same request, is an error.
func (a *answers) restore(e answer) error {
	if !a.on() {
		return nil
	}
	if e.req == 0 || a.get(e.user, e.req) != nil {
		return fmt.Errorf("user %d's request %#x answered twice", e.user, e.req)
	}
	a.put(e, 0)
	return nil
}

// loadOrSkip loads the entries of a snapshot part, or reads past them when
// ids are not kept.
func (a *answers) loadOrSkip(r *reader) error {
	if a.on() {
		return a.load(r)
	}
	skip := answers{window: 1}
	return skip.load(r)
}

// returned forgets the answer that named shake envelope env, if one does:
// the envelope went back to the pool (its answer was refused "overloaded"
// when its record was lost, or never left the connection's output), so that
// request did nothing, and a retry with its id is served as new, never told
// the envelope. A scan: envelopes go back only when their answer could not
// be given.
func (a *answers) returned(env uint64) {
	for q := a.head; q < a.head+a.n; q++ {
		if e := &a.fifo[q&uint64(len(a.fifo)-1)]; e.env == env && e.typ == proto.Shake && e.status == proto.ShakeGot {
			e.status = gone
			return
		}
	}
}
