package cluster

import (
	"math/rand/v2"
	"sync"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// A crossing is a request that went to another gateway (an OPEN of an
// envelope whose SET runs there, a CHAT to a user connected there) and waits
// for its answer. The answer finds the requester's connection here by the
// crossing's id; a crossing not answered within the bound is answered
// "unavailable" here, and its answer, if it comes later, is dropped. An
// OPEN's share drawn there meanwhile stays its opener's: the OPEN sent again
// is answered "already" with it.
type crossing struct {
	h      conn.Handle
	to     int // the gateway it went to: the only one whose answer is taken
	kind   event.Kind
	user   uint32
	peer   uint32
	stamp  uint64
	env    uint64
	recvNs int64
}

type expiry struct {
	xid      uint32
	deadline int64
}

// crossings is the table of a gateway's crossings in flight. Links add
// (from their goroutines), the receiver takes, the sweeper expires: under mu,
// once per event, short.
type crossings struct {
	mu    sync.Mutex
	next  uint32
	open  map[uint32]crossing
	queue []expiry // in deadline order: every crossing gets the same bound
	head  int
	// urgent holds the crossings due before the last one queued: those to
	// a gateway that is down, due at once.
	urgent []expiry
}

func newCrossings() *crossings {
	// A random start, so that an answer to a gateway that restarted finds no
	// crossing of the new run by chance.
	return &crossings{next: rand.Uint32(), open: make(map[uint32]crossing)}
}

// add records ev's crossing to gateway to, due by deadline, and returns its
// id (never 0).
func (x *crossings) add(ev *event.Event, to int, deadline int64) uint32 {
	x.mu.Lock()
	x.next++
	if x.next == 0 {
		x.next++
	}
	id := x.next
	x.open[id] = crossing{h: ev.Conn, to: to, kind: ev.Kind, user: ev.User, peer: ev.Peer, stamp: ev.Stamp, env: ev.Env,
		recvNs: ev.RecvNs}
	if n := len(x.queue); n > x.head && deadline < x.queue[n-1].deadline {
		x.urgent = append(x.urgent, expiry{id, deadline})
	} else {
		x.queue = append(x.queue, expiry{id, deadline})
	}
	x.mu.Unlock()
	return id
}

// notWaiting is takeAnswer's reason for an answer whose crossing is no
// longer waiting: answered "unavailable" already (or never sent).
const notWaiting = "no crossing waits for it"

// takeAnswer removes and returns crossing xid when a is its answer from
// gateway from: sent by the gateway the crossing went to, for its user, a
// frame of the request's kind with its stamp. Otherwise it leaves the
// crossing waiting and says why a was refused.
func (x *crossings) takeAnswer(xid uint32, from int, a *event.Event) (crossing, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.open[xid]
	switch {
	case !ok:
		return c, notWaiting
	case c.to != from:
		return c, "an answer from a gateway the request did not go to"
	case c.user != a.User:
		return c, "an answer for another user than the request's"
	case !answers(&c, a.Frame()):
		return c, "an answer whose frame does not answer the request"
	}
	delete(x.open, xid)
	return c, ""
}

// answers reports whether frame b answers crossing c: one OPEN_RESULT of
// its envelope, or one CHAT_ACK to its recipient, with its stamp.
func answers(c *crossing, b []byte) bool {
	f, size, err := proto.NextResponse(b)
	if err != nil || size != len(b) || f.Stamp != c.stamp {
		return false
	}
	switch {
	case c.kind == event.KOpen && f.Type == proto.OpenResult:
		_, env, _ := f.OpenResult()
		return env == c.env
	case c.kind == event.KChat && f.Type == proto.ChatAck:
		_, to := f.ChatAck()
		return to == c.peer
	}
	return false
}

// expire removes the crossings due by now and appends them, with their
// ids, to out.
func (x *crossings) expire(now int64, out []expired) []expired {
	x.mu.Lock()
	defer x.mu.Unlock()
	kept := x.urgent[:0]
	for _, e := range x.urgent {
		if e.deadline > now {
			kept = append(kept, e)
		} else if c, ok := x.open[e.xid]; ok {
			delete(x.open, e.xid)
			out = append(out, expired{e.xid, c})
		}
	}
	x.urgent = kept
	for x.head < len(x.queue) && x.queue[x.head].deadline <= now {
		e := x.queue[x.head]
		x.head++
		if c, ok := x.open[e.xid]; ok {
			delete(x.open, e.xid)
			out = append(out, expired{e.xid, c})
		}
	}
	if x.head > 1024 && x.head*2 > len(x.queue) { // amortised: drop the consumed head
		x.queue = x.queue[:copy(x.queue, x.queue[x.head:])]
		x.head = 0
	}
	return out
}

// expireOf removes the crossings of the requesters for which of is true,
// due or not, and appends them, with their ids, to out.
func (x *crossings) expireOf(of func(user uint32) bool, out []expired) []expired {
	x.mu.Lock()
	defer x.mu.Unlock()
	for xid, c := range x.open {
		if of(c.user) {
			delete(x.open, xid)
			out = append(out, expired{xid, c})
		}
	}
	return out
}

// waiting is the number of crossings in flight.
func (x *crossings) waiting() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.open)
}

type expired struct {
	xid uint32
	c   crossing
}
