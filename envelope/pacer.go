package envelope

import (
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
