package ingress

import (
	"math"
	"time"
)

// chatRate is the CHAT rate of every connection (Options.ChatRate,
// ChatBurst): a token bucket that holds burst tokens when full and gains
// rate a second, kept per connection in one int64 of conn.Conn (ChatTAT),
// GCRA's theoretical arrival time tat. A CHAT at now is within the rate
// while tat − now ≤ (burst − 1)·interval, and moves tat to max(tat, now) +
// interval. A tat of 0, a new connection's, is a full bucket. One compare
// and one add per CHAT, no state beyond the connection's, no allocation.
type chatRate struct {
	interval  uint64 // ns per token; 0: no limit
	tolerance uint64 // (burst − 1)·interval: how far tat may run ahead of now
}

// maxChatWindow bounds interval and tolerance (2⁵⁵ ns, about 417 days), so
// that their sum and tat + interval stay far inside an int64 whatever the
// options: a bucket that takes longer than that to refill is as good as
// never refilled.
const maxChatWindow = 1 << 55

func newChatRate(rate float64, burst int) chatRate {
	if !(rate > 0) {
		return chatRate{}
	}
	iv := min(max(float64(time.Second)/rate, 1), maxChatWindow)
	tol := min(float64(max(burst, 1)-1)*iv, maxChatWindow)
	return chatRate{interval: uint64(iv), tolerance: uint64(tol)}
}

// take reports whether a CHAT at now is within the rate of a connection
// whose bucket is tat, and the tat to store if that CHAT is let through
// (the caller stores it only then: a CHAT refused for another reason costs
// no token).
func (r chatRate) take(tat, now int64) (next int64, ok bool) {
	if r.interval == 0 {
		return tat, true
	}
	if tat <= now { // full
		return after(now, r.interval), true
	}
	switch ahead := uint64(tat) - uint64(now); { // exact: tat > now
	case ahead > r.tolerance+r.interval:
		// Further ahead than a CHAT can put it: the clock went back.
		// Starting full again beats refusing the user until it catches up.
		return after(now, r.interval), true
	case ahead > r.tolerance:
		return tat, false
	}
	return after(tat, r.interval), true
}

// after is t + d, or math.MaxInt64 where that overflows.
func after(t int64, d uint64) int64 {
	if n := t + int64(d); n >= t {
		return n
	}
	return math.MaxInt64
}
