package envelope

import (
	"fmt"
	"math"
	"math/bits"
)

const nsPerSecond = 1e9

// TickInterval is the longest gap the campaign producer should leave between
// calls to Due. Dealing happens only at ticks, so a window of one second
// (aligned any way) sees rate·gap/1s envelopes more or fewer than rate;
// 10 ms keeps that within 1% (+1 for rounding). At 50 ms it would be 5%.
const TickInterval = 10_000_000 // ns

// Pacer says how many envelopes of a campaign are due at a given time:
// min(total, ⌊rate·elapsed/1s⌋), in exact 128-bit integer arithmetic. Any
// whole second therefore falls due with exactly rate envelopes, any window of
// length d with rate·d/1s ± 1, and the last one at start + ⌈total·1s/rate⌉.
// The producer deals Due(now) minus what it has dealt, so a late tick
// catches up and rounding never accumulates.
//
// A Pacer is immutable after NewPacer; its methods are safe for concurrent
// use. The zero value has rate 0 and never makes anything due.
type Pacer struct {
	start int64 // ns, same clock as the times passed to Due
	rate  uint64
	total uint64
}

// NewPacer returns a Pacer for total envelopes at rate per second from
// startNs. Rate is validated by the admin API (1 ≤ rate ≤ 1,000,000), but any
// rate works here.
func NewPacer(startNs int64, rate, total uint64) Pacer {
	return Pacer{start: startNs, rate: rate, total: total}
}

// Due returns how many envelopes should have been dealt by nowNs:
// min(total, ⌊rate·(nowNs−start)/1s⌋), and 0 before the start.
func (p Pacer) Due(nowNs int64) uint64 {
	if nowNs <= p.start {
		return 0
	}
	elapsed := uint64(nowNs - p.start) // < 2^64 even when start < 0 < now
	hi, lo := bits.Mul64(p.rate, elapsed)
	if hi >= nsPerSecond { // the quotient would not fit 64 bits: far past the end
		return p.total
	}
	due, _ := bits.Div64(hi, lo, nsPerSecond)
	return min(due, p.total)
}

// At returns the earliest time at which Due reports at least n: start +
// ⌈n·1s/rate⌉. It is math.MaxInt64 when n exceeds the total, the rate is 0 or
// the time does not fit an int64. A producer at a low rate sleeps until
// At(dealt+1) instead of ticking for nothing.
func (p Pacer) At(n uint64) int64 {
	if n == 0 {
		return p.start
	}
	if n > p.total || p.rate == 0 {
		return math.MaxInt64
	}
	hi, lo := bits.Mul64(n, nsPerSecond)
	if hi >= p.rate {
		return math.MaxInt64
	}
	q, rem := bits.Div64(hi, lo, p.rate)
	if rem != 0 {
		q++
	}
	if q > uint64(math.MaxInt64) || int64(q) > math.MaxInt64-p.start {
		return math.MaxInt64
	}
	return p.start + int64(q)
}

// Total returns the number of envelopes in the campaign.
func (p Pacer) Total() uint64 { return p.total }

// Rate returns the campaign's rate per second.
func (p Pacer) Rate() uint64 { return p.rate }

// Dealer splits each tick's count of envelopes over the SETs and into ring
// events of at most maxBatch envelopes.
//
// It deals envelope by envelope round-robin, as if numbered 0, 1, 2, … across
// all ticks with envelope j going to SET (j mod sets): the cursor persists
// across ticks, so after any tick the per-SET totals differ by at most one,
// whatever the rate, the tick sizes and the number of SETs. The per-envelope
// rotation is done arithmetically: n/sets each plus one more for the next
// n%sets SETs, O(min(n, sets) + events) per call.
//
// Rejected: rotating whole batches (one batch of up to maxBatch per SET in
// turn). It sends fuller events but is unfair whenever tick sizes repeat: with
// 2 SETs and 65 envelopes a tick, SET 0 would get 64 a tick and SET 1 only 1,
// forever.
//
// A Dealer is owned by the campaign producer's goroutine and is not safe for
// concurrent use. Use NewDealer; the zero value is not usable.
type Dealer struct {
	sets     int
	maxBatch uint32
	cursor   int // the SET that gets the next envelope
}

// NewDealer returns a Dealer over sets SETs, at most maxBatch envelopes an
// event. It needs 1 ≤ sets ≤ MaxSETs and maxBatch ≥ 1.
func NewDealer(sets int, maxBatch uint32) (*Dealer, error) {
	if sets < 1 || sets > MaxSETs {
		return nil, fmt.Errorf("envelope: cannot deal over sets=%d: need 1..%d", sets, MaxSETs)
	}
	if maxBatch < 1 {
		return nil, fmt.Errorf("envelope: cannot deal with maxBatch=%d: need at least 1", maxBatch)
	}
	return &Dealer{sets: sets, maxBatch: maxBatch}, nil
}

// Deal deals n envelopes, calling visit once per event with its SET and its
// count (1 ≤ count ≤ maxBatch). The SETs are visited in rotation order from
// the cursor, each SET's events consecutively. Deal does not allocate.
func (d *Dealer) Deal(n uint64, visit func(set int, count uint32)) {
	sets := uint64(d.sets)
	each, extra := n/sets, int(n%sets)
	visited := d.sets
	if each == 0 {
		visited = extra // the other SETs get nothing this time
	}
	s := d.cursor
	for i := 0; i < visited; i++ {
		c := each
		if i < extra {
			c++
		}
		for c > 0 {
			b := uint32(min(c, uint64(d.maxBatch)))
			visit(s, b)
			c -= uint64(b)
		}
		if s++; s == d.sets {
			s = 0
		}
	}
	d.cursor = (d.cursor + extra) % d.sets
}

// Resize deals over sets SETs from the next Deal on (the SETs run here
// changed); the rotation goes on from where it was. It needs
// 1 ≤ sets ≤ MaxSETs.
func (d *Dealer) Resize(sets int) {
	if sets < 1 || sets > MaxSETs {
		panic(fmt.Sprintf("BUG: envelope: cannot deal over sets=%d", sets))
	}
	d.sets, d.cursor = sets, d.cursor%sets
}

// Sets returns the number of SETs dealt over.
func (d *Dealer) Sets() int { return d.sets }
