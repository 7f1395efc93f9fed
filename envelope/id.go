package envelope

import (
	"fmt"
	"math"
	"time"
)

// Envelope ids are u64, never 0 (0 is "no envelope" on the wire):
//
//	group: 0 | SET:12 | seq:51   seq counts µs since idEpoch      → 2096
//	shake: 1 | SET:12 | seq:51   seq counts µs since idEpoch      → 2096
//
// Each SET owns its ids of both kinds: group envelopes are created in the
// SET, and a campaign deals into a SET only from the gateway running it,
// which starts the SET's shake generator past the last id the SET holds
// (IDGen.After). So no id carries a gateway's number, and a cluster needs
// none to keep them unique.
//
// Uniqueness across restarts comes from where a generator starts, not from an
// epoch field: its sequence starts at the wall clock in units, one past
// (now − idEpoch)/unit, and counts up by one per id. As long as a generator
// issues on average at most one id per unit since it started — 1,000,000
// group or shake ids/s per SET (100× the 10,000/s required) — its sequence
// stays behind the clock, so any generator started later for the same
// owner, in this process or after a restart, even within the same second,
// starts above every id it issued. Within a run ids are unique by the owner
// field and the counter. A shake generator is moreover started past the
// SET's last durable deal: an id that never became durable was never told,
// and may be issued again.
//
// Capacity is therefore set by the calendar, not the load: the 51-bit
// sequences reach 2^51 µs in May 2096. Below one id per unit, the rate does
// not matter: 200 group envelopes/s on a single SET (or spread over many)
// use the space 5,000× slower than the clock does, and from 2026 a counter
// driven at 10,000/s on one SET would need 6,900 years to wrap (347,000 at
// 200/s).
//
// Limits: the wall clock must not step back across a restart by more than
// the time the old run's ids ran ahead of it (zero below the rates above);
// at most MaxSETs SETs; a run that outlives 2096 panics on exhaustion.
//
// Shake ids of earlier versions (1 | producer:8 | seq:55, seq in 1/8 µs)
// fall in the space of SET 16·producer at eight times the sequence: a
// generator started past one (After) skips ahead, and one started fresh
// stays below them until 2040, long after any such envelope was shaken.
//
// Rejected: the proposed kind | start-epoch | SET | counter layout. A counter
// for years at 10,000/s needs ≥ 40 bits, leaving ≤ 11 bits of epoch: start
// seconds wrap every 34 minutes (1/16 s every 2 minutes) and a restart that
// lands on an old epoch reuses every id from counter 0 up. A restart counter
// instead of a time would need state on disk, which the server does not keep.
const (
	// MaxSETs is the number of SETs an id can name (12 bits).
	MaxSETs = 1 << setBits

	setBits      = 12
	groupSeqBits = 63 - setBits // 51
	shakeSeqBits = 63 - setBits // 51
	shakeBit     = 1 << 63

	groupUnit = 1000 // ns per group sequence step: 1 µs
	shakeUnit = 1000 // ns per shake sequence step: 1 µs
)

// idEpoch is 2025-01-01T00:00:00Z in Unix ns, the zero of every sequence.
var idEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// IDGen hands out the envelope ids of one owner: one SET's group envelopes or
// its shake envelopes. It only counts; the clock is read
// once, by the caller of its constructor.
//
// An IDGen is owned by one goroutine and is not safe for concurrent use. The
// zero value is not usable (Next panics); use NewGroupIDGen or NewShakeIDGen.
type IDGen struct {
	next uint64 // the next id, kind and owner bits included; 0 in the zero value
	last uint64 // the owner's last id (one past it overflows for the shake ids of the last SET)
}

// NewGroupIDGen returns the group id generator of SET set (0 ≤ set <
// MaxSETs), starting from the wall clock nowNs (time.Now().UnixNano()).
func NewGroupIDGen(set int, nowNs int64) (IDGen, error) {
	if set < 0 || set >= MaxSETs {
		return IDGen{}, fmt.Errorf("envelope: cannot make group ids for set=%d: need 0..%d", set, MaxSETs-1)
	}
	return newIDGen(uint64(set)<<groupSeqBits, groupSeqBits, groupUnit, nowNs)
}

// NewShakeIDGen returns the shake id generator of SET set (0 ≤ set <
// MaxSETs), starting from the wall clock nowNs; the gateway running the SET
// deals with it, started past the SET's last deal (After).
func NewShakeIDGen(set int, nowNs int64) (IDGen, error) {
	if set < 0 || set >= MaxSETs {
		return IDGen{}, fmt.Errorf("envelope: cannot make shake ids for set=%d: need 0..%d", set, MaxSETs-1)
	}
	return newIDGen(shakeBit|uint64(set)<<shakeSeqBits, shakeSeqBits, shakeUnit, nowNs)
}

func newIDGen(base uint64, seqBits uint, unit, nowNs int64) (IDGen, error) {
	if nowNs < idEpoch {
		return IDGen{}, fmt.Errorf("envelope: cannot make ids with the clock at %s: before %s",
			time.Unix(0, nowNs).UTC().Format(time.RFC3339), time.Unix(0, idEpoch).UTC().Format(time.RFC3339))
	}
	seq := uint64((nowNs-idEpoch)/unit) + 1 // + 1: never 0, and strictly after anything issued at this unit
	if seq >= 1<<seqBits {
		return IDGen{}, fmt.Errorf("envelope: cannot make ids with the clock at %s: id space ends there",
			time.Unix(0, nowNs).UTC().Format(time.RFC3339))
	}
	return IDGen{next: base | seq, last: base | (1<<seqBits - 1)}, nil
}

// Next returns a new id.
func (g *IDGen) Next() uint64 {
	return g.Reserve(1)
}

// Reserve returns the first of n consecutive new ids (n ≥ 1), so a batch of
// envelopes can travel as a first id and a count.
func (g *IDGen) Reserve(n uint64) uint64 {
	id := g.next
	// id is 0 in the zero value and once the last SET's shake space
	// wraps; id > last once any other space is used up (2096).
	if n == 0 || id == 0 || id > g.last || n-1 > g.last-id {
		panic("BUG: envelope: Reserve(0), zero IDGen or id space exhausted")
	}
	g.next += n
	return id
}

// OwnerSET returns the SET that owns group envelope id, or -1 for a shake id
// or 0, which no SET owns. An OPEN routes on it without a lookup; the router
// still answers "no such envelope" for a SET it does not run.
func OwnerSET(id uint64) int {
	if id&shakeBit != 0 || id == 0 {
		return -1
	}
	return int(id >> groupSeqBits)
}

// IsShake reports whether id is a shake envelope's (top bit set).
func IsShake(id uint64) bool {
	return id&shakeBit != 0
}

// Peek is the id Next would return.
func (g *IDGen) Peek() uint64 { return g.next }

// After makes the generator hand out only ids after id, when id is one of its
// owner's: at recovery, ids issued before the restart (the clock may have
// gone back, or they ran ahead of it) are never issued again.
func (g *IDGen) After(id uint64) {
	if id >= g.next && id <= g.last && id != math.MaxUint64 {
		g.next = id + 1
	}
}
