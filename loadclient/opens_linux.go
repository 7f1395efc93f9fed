//go:build linux

package loadclient

import (
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// Opens: each ENVELOPE push the loop opens is an open, which ends with the final answer of its
// OPEN, OPEN_RESULT 0 to 4. A share, once drawn for a user, is the user's for good and a repeated
// OPEN answers 1 with it, so an OPEN whose answer did not reach the client, or that may have
// drawn a share without telling it, is sent again for the same user until an answer settles it
// or the run's drain ends:
//
//   - answered 5 (overloaded, nothing drawn; in a cluster also "the envelope's gateway did not
//     answer in time", a share may be drawn): again after openRetryMin plus up to
//     openRetryJitter, a wait that does not hammer a server shedding load;
//   - in flight when its connection ended, whatever the way (reset, close, ERROR 8 or 9, a
//     -timeout drop): again once the user has logged in again, on whichever gateway.
//
// A re-sent OPEN answered 1 tells the share an earlier OPEN of the open drew: money told,
// counted once (Learned, its amount in OpenAmount). A re-sent OPEN answered 0 is an ordinary
// OPEN 0. A first OPEN answered 1 (a push of an envelope opened before) tells nothing new and
// counts nothing. A loop keeps at most one open per user and envelope: a push of an envelope whose
// open is under way is counted (Repeated), not opened again, so no share can be told twice.
//
// The opens live in the loop, not in its connections (a uconn stays 48 bytes): a map from a
// connection's index to the few opens of its user, their slices reused through a free list, and
// a heap of the re-sends waiting out their time. Steady state allocates nothing.

// Re-sends after OPEN_RESULT 5.
const (
	openRetryMin    = 50 * time.Millisecond // on a single server 5 is overload: do not hammer
	openRetryJitter = 50 * time.Millisecond // spread evenly over [min, min+jitter]
	keepOpens       = 16                    // larger slices go back to the GC, not the free list
)

// openTask is one open without a final answer.
type openTask struct {
	env   uint64
	at    int64 // loop ns: waiting to be sent again, not before this (after status 5); 0 at once
	flags uint8
}

// openTask flags.
const (
	oInFlight uint8 = 1 << iota // an OPEN of it is in flight on the user's connection
	oAgain                      // an OPEN of it went unsettled: the next one, or the one in flight, is a re-send
)

// opens are a loop's opens without a final answer.
type opens struct {
	byConn map[uint32][]openTask // by connection index
	free   [][]openTask          // emptied slices, for the next user's opens
	due    retryHeap             // re-sends after status 5 by time: idx's opens due then, if logged in
	n      int64                 // opens in byConn

	settled bool // the drain is over: no OPEN is sent again, the opens left stay unresolved
}

func newOpens() opens { return opens{byConn: map[uint32][]openTask{}} }

// has reports whether the user of idx has opens to send again: without a final answer, and
// the drain not over.
func (o *opens) has(idx uint32) bool {
	if o.n == 0 || o.settled {
		return false
	}
	_, ok := o.byConn[idx]
	return ok
}

// openPush opens envelope env, pushed to c: an OPEN, unless an open of env is under way.
func (l *loop) openPush(c *uconn, idx uint32, env uint64) {
	ts := l.opens.byConn[idx]
	for i := range ts {
		if ts[i].env == env {
			l.c.Repeated++ // its open under way tells the share
			return
		}
	}
	b := l.outBuf(c, idx)
	if b == nil {
		return // counted as dropped (backlog)
	}
	*b = proto.AppendOpen(*b, uint64(l.now), env)
	l.sent(c, reqOpen)
	if ts == nil {
		if n := len(l.opens.free); n > 0 {
			ts = l.opens.free[n-1]
			l.opens.free = l.opens.free[:n-1]
		}
	}
	l.opens.byConn[idx] = append(ts, openTask{env: env, flags: oInFlight})
	l.opens.n++
}

// openAnswered settles the OPEN of env in flight on the connection of idx, answered st with
// amount: a final answer ends its open, 5 has it sent again after a wait. It returns false when
// no OPEN of env was in flight there.
func (l *loop) openAnswered(idx uint32, st uint8, env uint64, amount uint32) bool {
	ts := l.opens.byConn[idx]
	i := 0
	for i < len(ts) && (ts[i].env != env || ts[i].flags&oInFlight == 0) {
		i++
	}
	if i == len(ts) {
		return false
	}
	t := &ts[i]
	switch {
	case st == proto.OpenOverloaded:
		t.flags = oAgain
		t.at = l.now + int64(openRetryMin) + l.rng.Int64N(int64(openRetryJitter)+1)
		l.opens.due.push(retryAt{t.at, idx})
		return true
	case st == proto.OpenOK:
		l.c.OpenAmount += uint64(amount)
	case st == proto.OpenAlready && t.flags&oAgain != 0:
		l.c.Learned++
		l.c.LearnedAmount += uint64(amount)
		l.c.OpenAmount += uint64(amount)
	}
	last := len(ts) - 1
	ts[i] = ts[last]
	ts = ts[:last]
	l.opens.n--
	if last > 0 {
		l.opens.byConn[idx] = ts
		return true
	}
	delete(l.opens.byConn, idx)
	if cap(ts) <= keepOpens {
		l.opens.free = append(l.opens.free, ts)
	}
	return true
}

// openLost marks the OPENs in flight on the connection of idx, which ended, to be sent again
// once its user has logged in again.
func (l *loop) openLost(idx uint32) {
	ts := l.opens.byConn[idx]
	for i := range ts {
		if ts[i].flags&oInFlight != 0 {
			ts[i].flags, ts[i].at = oAgain, 0
		}
	}
}

// openAgain sends again, on c, logged in, the opens of idx that wait and are due.
func (l *loop) openAgain(c *uconn, idx uint32) {
	if l.opens.settled {
		return
	}
	ts := l.opens.byConn[idx]
	for i := range ts {
		t := &ts[i]
		if t.flags&oInFlight != 0 || t.at > l.now {
			continue
		}
		b := l.outBuf(c, idx)
		if b == nil { // the output is over its limit (counted as dropped): try again later
			t.at = l.now + int64(openRetryMin)
			l.opens.due.push(retryAt{t.at, idx})
			return
		}
		*b = proto.AppendOpen(*b, uint64(l.now), t.env)
		l.sent(c, reqOpen)
		l.c.Resent++
		t.flags |= oInFlight
	}
}

// openDue sends again the opens whose wait after status 5 is over, of users logged in; a user
// not logged in sends them when it is.
func (l *loop) openDue() {
	for len(l.opens.due) > 0 && l.opens.due[0].at <= l.now {
		idx := l.opens.due.pop().idx
		if c := &l.conns[idx]; c.state == stReady {
			l.openAgain(c, idx)
			if l.resend.pending != 0 {
				l.shakeAgain(c, idx) // a SHAKE sent again and refused at the door
			}
		}
	}
}
