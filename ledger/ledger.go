package ledger

import (
	"math/bits"
	"sync/atomic"
)

// pad keeps each stage's counters on cache lines of their own, so that one
// stage's writes do not slow another's.
type pad [128]byte

// Ledger is one SET's counters. Every group is written only by the stage it
// is named after and read at any time (admin /stats and /metrics sum the
// SETs' ledgers at scrape time): no locks, one writer per counter.
type Ledger struct {
	_       pad
	Session SessionCounters
	_       pad
	Shake   ShakeCounters
	_       pad
	Split   SplitCounters
	_       pad
	Egress  EgressCounters
	_       pad
}

// SessionCounters are written by the session stage.
type SessionCounters struct {
	Logins, Replaced               atomic.Uint64
	Online                         atomic.Int64
	ChatReceived, ChatDelivered    atomic.Uint64
	ChatOffline                    atomic.Uint64
	ChatDropped                    atomic.Uint64 // not delivered: the recipient's backlog was full (CHAT_ACK 2)
	Pushes, PushesOffline          atomic.Uint64
	SystemPicks, SystemPicksFailed atomic.Uint64 // send campaign envelopes given / refused recipients
	// ENVELOPE pushes kept for a recipient who was offline, until it logs in.
	PendingPushes     atomic.Int64  // gauge: pushes kept
	PendingUsers      atomic.Int64  // gauge: users with pushes kept
	PendingDropped    atomic.Uint64 // kept pushes dropped for room: the user's oldest past its cap, or the SET's oldest
	PendingRechecked  atomic.Uint64 // kept pushes sent back to their envelope's SET at the user's login
	PushesUndelivered atomic.Uint64 // pushes egress could not write (the connection went): kept like offline ones
}

// ShakeCounters are written by the shake stage.
type ShakeCounters struct {
	Requests, Empty          atomic.Uint64
	Popped, PoppedAmount     atomic.Uint64
	Created, CreatedAmount   atomic.Uint64
	Returned, ReturnedAmount atomic.Uint64 // envelopes whose answer could not be written, back in the pool
	Pool, PoolAmount         atomic.Uint64 // gauges: the pool now
	// Request ids (docs/PROTOCOL.md, Request ids): SHAKEs answered again
	// from the answer kept for their id, and refused for an id outside the
	// window.
	Replayed, Expired atomic.Uint64
	RequestIDs        atomic.Int64 // gauge: answers kept for request ids
}

// SplitCounters are written by the split stage.
type SplitCounters struct {
	Created, CreatedAmount   atomic.Uint64
	Opened, OpenedAmount     atomic.Uint64
	Refunded, RefundedAmount atomic.Uint64 // expired envelopes' remainders
	Live, LiveAmount         atomic.Uint64 // gauges: envelopes not fully opened, and what is left in them
	Held                     atomic.Int64  // gauge: envelopes in memory, live or fully opened and retained
	Queued                   atomic.Int64  // gauge: entries of the expiry queues (at most about twice Held)
	SendInvalid              atomic.Uint64
	OpenStatus               [6]atomic.Uint64 // OPEN answers by status
	// SENDs answered 3 (limited), by the first limit they hit.
	SendLimitedRate, SendLimitedLive, SendLimitedBudget atomic.Uint64
	SystemOverBudget                                    atomic.Uint64 // send campaign envelopes not created: the SET was at its budget
	Evicted                                             atomic.Uint64 // fully opened envelopes forgotten before their retention, to make room
	Senders                                             atomic.Int64  // gauge: users with SEND state (a bucket not yet full, or live envelopes)
	Repushed, RepushStale                               atomic.Uint64 // kept pushes rechecked at login: pushed again, or no longer openable by the user
	// Request ids, as the shake counters' (ShakeCounters.Replayed).
	SendReplayed, SendExpired, OpenReplayed, OpenExpired atomic.Uint64
	RequestIDs                                           atomic.Int64 // gauge: answers kept for request ids
}

// EgressCounters are written by the egress stage.
type EgressCounters struct {
	Got, GotAmount atomic.Uint64 // shake envelopes whose answer reached a live connection's output
	Returned       atomic.Uint64 // shake envelopes sent back to the pool by egress
	OpenUntold     atomic.Uint64 // OPEN_RESULT 0 answers that never reached their connection: the share stays the opener's, told by a repeated OPEN
	ShakeUntold    atomic.Uint64 // SHAKE_RESULT 1 answers to a request id that never reached their connection: the envelope stays got, told by a retry with the id
	Frames         [16]atomic.Uint64
	Bytes, Writes  atomic.Uint64
	Dropped        atomic.Uint64 // frames for connections that were gone
	CutOff         atomic.Uint64 // connections closed for a backlog over the limit (ERROR 6)
	Conns          atomic.Int64  // gauge: logged-in connections of the SET
	// Held: money answers waiting for their record to be durable, and
	// events for other SETs waiting for room (gauge, as of the last batch).
	Held atomic.Int64
	// Latency by the type of the request answered (RequestTypes): from the
	// ingress's read (the start of its loop's chunk of reads) to the end of
	// the write.
	LatencyBuckets [RequestTypes][LatencyBuckets]atomic.Uint64
	LatencySumNs   [RequestTypes]atomic.Uint64
	// The part of it before the egress began the batch that answers it:
	// waiting for the SET to run, and the stages before egress.
	WaitBuckets [RequestTypes][LatencyBuckets]atomic.Uint64
	WaitSumNs   [RequestTypes]atomic.Uint64
}

// The ingress → egress latency histograms are log-linear in whole µs: each
// power of two is cut into latencySub equal buckets, so from 4 µs up a
// bucket's upper bound is at most 25 % above any latency in it
// (power-of-two buckets could not tell 0.6 ms from 1 ms). Bucket i counts
// latencies below LatencyBucketUs(i) µs and not below the bound of i-1;
// the last, everything from 2^22 µs (~4.2 s) up.
const (
	latencySubBits = 2
	latencySub     = 1 << latencySubBits
	LatencyBuckets = 85 // 4 below 4 µs, 4 per power of two up to 2^22 µs, and the rest
)

// LatencyBucket returns the bucket of a latency of us whole µs.
func LatencyBucket(us uint64) int {
	if us < latencySub {
		return int(us)
	}
	n := bits.Len64(us) // us has n bits; its top latencySubBits+1 pick the bucket
	b := (n-latencySubBits)<<latencySubBits + int(us>>(n-latencySubBits-1)) - latencySub
	return min(b, LatencyBuckets-1)
}

// LatencyBucketUs returns the upper bound of bucket i in µs, for i below
// LatencyBuckets-1 (the last has none).
func LatencyBucketUs(i int) uint64 {
	if i < latencySub {
		return uint64(i) + 1
	}
	n := i>>latencySubBits + latencySubBits      // bits of the bucket's latencies
	top := uint64(i&(latencySub-1) + latencySub) // their top latencySubBits+1 bits
	return (top + 1) << (n - latencySubBits - 1)
}

// RequestTypes is the number of request types latency is kept for: LOGIN,
// SHAKE, OPEN, SEND, CHAT, PING, in that order (event.KLogin to event.KPing).
const RequestTypes = 6

// FrameIndex maps a server-to-client frame type to its index in Frames.
func FrameIndex(t byte) int {
	if t == 0xFF {
		return 15
	}
	return int(t & 0x0F)
}
