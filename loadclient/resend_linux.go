//go:build linux

package loadclient

import (
	"github.com/hongbao-io/hongbao/proto"
)

// SHAKEs sent again (-request-ids): every SHAKE carries a request id made of its stamp (the
// unix time its schedule set: the second, and the nanoseconds in its low 32 bits), so a SHAKE
// in flight when its connection ended, whatever the way (reset, close, ERROR 8 or 9, a -timeout
// drop), is sent again with the same stamp and id once its user has logged in again, on
// whichever gateway: the server answers the retry as it answered the first (docs/PROTOCOL.md,
// Request ids), and a SHAKE_RESULT 1 the fault cut off is told by it. A retry keeps its stamp,
// so its latency counts the outage.
//
// Which SHAKEs were in flight: a money answer waits for its change to be durable and may be
// overtaken by a later empty or overloaded one (docs/PROTOCOL.md, Ordering and stamps), so the
// loop keeps every SHAKE it sent, for as long as one can be in flight (-timeout and a margin),
// in a FIFO in the order of their stamps (the schedule's), and marks each answered, found by
// its stamp with a binary search. The ones to send again, and in flight again, wait in a map
// by connection index, their slices reused. Steady state allocates nothing.

// sentShake is a SHAKE as the FIFO keeps it.
type sentShake struct {
	stamp    int64
	idx      uint32
	answered bool
}

// againShake is a SHAKE to send again, or sent again and not answered yet.
type againShake struct {
	stamp    int64
	inFlight bool
}

// resends are a loop's SHAKEs sent, and those to send again.
type resends struct {
	on      bool
	keep    int64       // ns a sent SHAKE stays in the FIFO
	fifo    []sentShake // a ring, its length a power of two, in stamp order
	head, n int
	byConn  map[uint32][]againShake // by connection index
	free    [][]againShake
	pending int64 // SHAKEs waiting to be sent again
	again   int64 // SHAKEs sent again and not answered
	settled bool  // the drain is over: nothing is sent again
}

func newResends(on bool, timeoutNs int64) resends {
	return resends{on: on, keep: 2*timeoutNs + 1e9, byConn: map[uint32][]againShake{}}
}

// shakeID is the request id of the SHAKE stamped stamp (0 without ids).
func (r *resends) shakeID(stamp int64) uint64 {
	if !r.on {
		return 0
	}
	return proto.NewRequestID(stamp/1e9, uint32(stamp))
}

func (r *resends) at(i int) *sentShake { return &r.fifo[(r.head+i)&(len(r.fifo)-1)] }

// sentShake notes a SHAKE the schedule sent on the connection of idx.
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
			grown[i] = *r.at(i)
		}
		r.fifo, r.head = grown, 0
	}
	r.fifo[(r.head+r.n)&(len(r.fifo)-1)] = sentShake{stamp: stamp, idx: idx}
	r.n++
}

// shakeAnswered marks the SHAKE stamped stamp on the connection of idx answered st. A SHAKE
// sent again and answered "overloaded" is sent again after a wait, as an OPEN answered 5:
// that answer says only that the retry was refused at the door, while the first SHAKE with its
// id may still be on its way to an answer (held for its journal during a stall).
func (l *loop) shakeAnswered(idx uint32, stamp int64, st uint8) {
	r := &l.resend
	if !r.on {
		return
	}
	if r.again > 0 {
		if as, ok := r.byConn[idx]; ok {
			for i := range as {
				if as[i].inFlight && as[i].stamp == stamp {
					r.again--
					if st == proto.ShakeOverloaded && !r.settled {
						as[i].inFlight = false
						r.pending++
						l.opens.due.push(retryAt{l.now + int64(openRetryMin) + l.rng.Int64N(int64(openRetryJitter)+1), idx})
						return
					}
					as[i] = as[len(as)-1]
					r.setConn(idx, as[:len(as)-1])
					return
				}
			}
		}
	}
	lo, hi := 0, r.n // the first entry stamped stamp or later
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); r.at(m).stamp < stamp {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for i := lo; i < r.n && r.at(i).stamp == stamp; i++ {
		if e := r.at(i); e.idx == idx {
			e.answered = true
			return
		}
	}
}

// setConn stores idx's SHAKEs to send again, returning an emptied slice for reuse.
func (r *resends) setConn(idx uint32, as []againShake) {
	if len(as) > 0 {
		r.byConn[idx] = as
		return
	}
	delete(r.byConn, idx)
	if cap(as) <= keepOpens {
		r.free = append(r.free, as)
	}
}

// shakesLost marks the k SHAKEs in flight on the connection of idx, which ended, to be sent
// again once its user has logged in again.
func (l *loop) shakesLost(idx uint32, k int) {
	r := &l.resend
	if !r.on || r.settled {
		return
	}
	as := r.byConn[idx]
	for i := range as {
		if as[i].inFlight && k > 0 {
			as[i].inFlight = false
			r.again--
			r.pending++
			k--
		}
	}
	if as == nil && k > 0 && len(r.free) > 0 {
		as, r.free = r.free[len(r.free)-1], r.free[:len(r.free)-1]
	}
	at := len(as)
	for i := r.n - 1; i >= 0 && k > 0; i-- {
		if e := r.at(i); e.idx == idx && !e.answered {
			e.answered = true // the retry is counted in byConn from now on
			as = append(as, againShake{stamp: e.stamp})
			k--
		}
	}
	for i, j := at, len(as)-1; i < j; i, j = i+1, j-1 { // oldest first
		as[i], as[j] = as[j], as[i]
	}
	r.pending += int64(len(as) - at)
	l.c.ShakeUnresolved += uint64(k) // older than the FIFO keeps: cannot be sent again
	if len(as) > 0 {
		r.byConn[idx] = as
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
	as, ok := r.byConn[idx]
	if !ok || r.settled {
		return
	}
	for i := range as {
		if as[i].inFlight {
			continue
		}
		b := l.outBuf(c, idx)
		if b == nil {
			return // the output is over its limit (counted as dropped): the rest wait for the next login
		}
		*b = proto.AppendShakeID(*b, uint64(as[i].stamp), r.shakeID(as[i].stamp))
		l.sent(c, reqShake)
		as[i].inFlight = true
		r.pending--
		r.again++
		l.c.ShakeResent++
	}
}

// settle ends the resends: the SHAKEs still waiting to be sent again are unresolved.
func (r *resends) settle(c *counters) {
	r.settled = true
	c.ShakeUnresolved += uint64(r.pending)
	r.pending = 0
}
