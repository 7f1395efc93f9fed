//go:build linux

package loadclient

import (
	"hongbao/proto"
)

// SHAKEs sent again (-request-ids): every SHAKE carries a request id made of its stamp (the
// unix time its schedule set: the second, and the nanoseconds in its low 32 bits), so a SHAKE
// in flight when its connection ended, whatever the way (reset, close, ERROR 8 or 9, a -timeout
// drop), is sent again with the same stamp and id once its user has logged in again, on
// whichever gateway: the server answers the retry as it answered the first (docs/PROTOCOL.md,
// Request ids), and a SHAKE_RESULT 1 the fault cut off is told by it. A retry keeps its stamp,
// so its latency counts the outage.
//
// The answers to one connection's SHAKEs come in the order they were sent (docs/PROTOCOL.md,
// Ordering and stamps), so the SHAKEs in flight on a connection that ends are the last ones it
// sent. The loop keeps every SHAKE it sent in a FIFO for as long as one can be in flight
// (-timeout and a margin) and finds them there from its end; the ones to send again wait in a
// map by connection index, their slices reused. Steady state allocates nothing.

// sentShake is a SHAKE as the FIFO keeps it.
type sentShake struct {
	stamp int64
	idx   uint32
}

// resends are a loop's SHAKEs to send again.
type resends struct {
	on      bool
	keep    int64       // ns a sent SHAKE stays in the FIFO
	fifo    []sentShake // a ring, its length a power of two
	head, n int
	byConn  map[uint32][]int64 // stamps to send again, by connection index
	free    [][]int64
	pending int64 // stamps in byConn
	settled bool  // the drain is over: nothing is sent again
}

func newResends(on bool, timeoutNs int64) resends {
	return resends{on: on, keep: 2*timeoutNs + 1e9, byConn: map[uint32][]int64{}}
}

// shakeID is the request id of the SHAKE stamped stamp (0 without ids).
func (r *resends) shakeID(stamp int64) uint64 {
	if !r.on {
		return 0
	}
	return proto.NewRequestID(stamp/1e9, uint32(stamp))
}

// sentShake notes a SHAKE sent on the connection of idx.
func (l *loop) sentShake(idx uint32, stamp int64) {
	r := &l.resend
	if !r.on {
		return
	}
	for r.n > 0 && r.fifo[r.head].stamp < l.now-r.keep {
		r.head = (r.head + 1) & (len(r.fifo) - 1)
		r.n--
	}
	if r.n == len(r.fifo) {
		grown := make([]sentShake, max(1024, 2*len(r.fifo)))
		for i := range r.n {
			grown[i] = r.fifo[(r.head+i)&(len(r.fifo)-1)]
		}
		r.fifo, r.head = grown, 0
	}
	r.fifo[(r.head+r.n)&(len(r.fifo)-1)] = sentShake{stamp, idx}
	r.n++
}

// shakesLost marks the last k SHAKEs sent on the connection of idx, which ended with them in
// flight, to be sent again once its user has logged in again.
func (l *loop) shakesLost(idx uint32, k int) {
	r := &l.resend
	if !r.on || r.settled {
		return
	}
	stamps := r.byConn[idx]
	if stamps == nil && len(r.free) > 0 {
		stamps, r.free = r.free[len(r.free)-1], r.free[:len(r.free)-1]
	}
	at := len(stamps)
	for i := r.n - 1; i >= 0 && k > 0; i-- {
		if e := r.fifo[(r.head+i)&(len(r.fifo)-1)]; e.idx == idx {
			stamps = append(stamps, e.stamp)
			k--
		}
	}
	for i, j := at, len(stamps)-1; i < j; i, j = i+1, j-1 { // oldest first
		stamps[i], stamps[j] = stamps[j], stamps[i]
	}
	l.c.ShakeUnresolved += uint64(k) // older than the FIFO keeps: cannot be sent again
	if len(stamps) > 0 {
		r.pending += int64(len(stamps) - at)
		r.byConn[idx] = stamps
	}
}

// has reports whether the user of idx has SHAKEs to send again.
func (r *resends) has(idx uint32) bool {
	if r.pending == 0 || r.settled {
		return false
	}
	_, ok := r.byConn[idx]
	return ok
}

// shakeAgain sends again, on c, logged in, the SHAKEs of idx its last connection left in
// flight.
func (l *loop) shakeAgain(c *uconn, idx uint32) {
	r := &l.resend
	stamps, ok := r.byConn[idx]
	if !ok || r.settled {
		return
	}
	sent := 0
	for _, stamp := range stamps {
		b := l.outBuf(c, idx)
		if b == nil {
			break // the output is over its limit (counted as dropped): the rest wait for the next login
		}
		*b = proto.AppendShakeID(*b, uint64(stamp), r.shakeID(stamp))
		l.sent(c, reqShake)
		l.sentShake(idx, stamp)
		sent++
	}
	l.c.ShakeResent += uint64(sent)
	r.pending -= int64(sent)
	if sent < len(stamps) {
		r.byConn[idx] = stamps[:copy(stamps, stamps[sent:])]
		return
	}
	delete(r.byConn, idx)
	if cap(stamps) <= keepOpens {
		r.free = append(r.free, stamps[:0])
	}
}

// settle ends the resends: the SHAKEs still waiting are unresolved.
func (r *resends) settle(c *counters) {
	r.settled = true
	c.ShakeUnresolved += uint64(r.pending)
	r.pending = 0
	clear(r.byConn)
}
