package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// link carries the events for the SETs of one other gateway: a ring, as a
// SET's, whose stage sends each batch as one message.
type link struct {
	n       *Node
	node    int
	subject string
	ring    *event.Ring
	buf     []byte
}

func newLink(n *Node, node int) (*link, error) {
	r, err := ring.New[event.Event](ring.Options{Size: n.o.Ring, Producers: ring.MultiProducer})
	if err != nil {
		return nil, fmt.Errorf("cluster: the link to node %d: %w", node, err)
	}
	l := &link{n: n, node: node, subject: n.own(fmt.Sprintf("%s.%d", subEvents, node)), ring: r,
		buf: make([]byte, 0, 64<<10)}
	r.AddStage(l, ring.StageOptions[event.Event]{Name: fmt.Sprintf("link%d", node), MaxBatch: 4096})
	return l, nil
}

// Handle implements ring.Handler: it sends the batch, in order. A request
// that waits for an answer enters the crossing table here, so its bound
// counts from when it leaves.
func (l *link) Handle(b event.Batch) {
	n := l.n
	l.buf = appendHeader(l.buf[:0], n.o.Node)
	count := 0
	now := time.Now()
	deadline := now.Add(n.o.Timeout).UnixNano()
	if !n.up(l.node) { // not up: its requests are answered at the next sweep, not after the bound
		deadline = now.UnixNano()
	}
	for q := b.Lo; q <= b.Hi; q++ {
		ev := b.At(q)
		if ev.Kind == event.KTick || ev.Kind == 0 {
			continue
		}
		if ev.JPos != 0 && !n.jn.Durable(ev.JPID, ev.JPos) {
			if err := n.jn.Wait(ev.JPID, ev.JPos); err != nil {
				// Never durable: the answer must not leave. The crossing's
				// bound answers the requester; a push is lost with its envelope.
				release(ev)
				continue
			}
		}
		var xid uint32
		switch {
		case ev.Conn.C != nil && (ev.Kind == event.KOpen || ev.Kind == event.KChat):
			xid = n.cross.add(ev, l.node, deadline)
		case ev.Conn.C == nil:
			xid = ev.Conn.Gen // an answer or cancel of a crossing from elsewhere
		}
		if len(l.buf)+eventLen+event.OutCap+bufLen(ev) > maxMessage && count > 0 {
			l.send(count)
			l.buf = appendHeader(l.buf[:0], n.o.Node)
			count = 0
		}
		l.buf = appendEvent(l.buf, ev, xid)
		count++
		release(ev)
	}
	if count > 0 {
		l.send(count)
	}
}

func bufLen(ev *event.Event) int {
	if ev.Buf == nil {
		return 0
	}
	return len(ev.Buf.B)
}

func release(ev *event.Event) {
	if ev.Buf != nil {
		bytebufferpool.Put(ev.Buf)
		ev.Buf = nil
	}
}

func (l *link) send(count int) {
	setCount(l.buf, count)
	if err := l.n.nc.Publish(l.subject, l.buf); err != nil {
		// Disconnected past the client's reconnect buffer, or closed: the
		// crossings in it time out and are answered "unavailable".
		l.n.M.PublishErrors.Add(1)
		return
	}
	l.n.M.Sent.Add(uint64(count))
	l.n.M.Messages.Add(1)
}

// target returns the SET an event crossing to this gateway is for; the
// sender routed it by the same rule (event.Bus).
func (n *Node) target(ev *event.Event) int {
	switch ev.Kind {
	case event.KOpen, event.KRepush:
		return envelope.OwnerSET(ev.Env)
	case event.KChat:
		return n.bus.SETOf(ev.Peer)
	case event.KAnswer, event.KPush:
		return n.bus.SETOf(ev.User)
	}
	return -1
}

// receive publishes the events of a message from another gateway into the
// rings of their SETs, waiting for room (only a stage that stopped would
// keep it waiting; the rings close after the node). The subject names the
// sender (identity.go); an event that sender could not have sent is
// dropped.
func (n *Node) receive(m *nats.Msg) {
	from, ok := n.peerSender(m.Subject)
	if !ok {
		n.forged.add(n.log, ForgedSubject, -1, "events on "+m.Subject)
		return
	}
	claimed, count, b, err := decodeHeader(m.Data)
	if err != nil {
		n.M.Malformed.Add(1)
		return
	}
	if claimed != from {
		n.forged.add(n.log, ForgedEvent, from, "a batch that names another sender")
		return
	}
	var ev event.Event
	for range count {
		var xid uint32
		if xid, b, err = decodeEvent(b, &ev); err != nil {
			n.M.Malformed.Add(1)
			return
		}
		n.M.Received.Add(1)
		set := n.target(&ev)
		if set < 0 { // a kind that does not cross
			if ev.Kind == event.KRetired17 {
				n.M.Stale.Add(1) // an earlier version's take-back, during a rolling upgrade
			} else {
				n.forged.add(n.log, ForgedEvent, from, n.mayNotSend(from, &ev))
			}
			release(&ev)
			continue
		}
		if set >= n.o.Sets || !n.bus.IsLocal(set) { // runs here now: its route is local
			n.M.Misrouted.Add(1)
			release(&ev)
			continue
		}
		if !n.admit(from, &ev) {
			release(&ev)
			continue
		}
		switch ev.Kind {
		case event.KAnswer:
			c, why := n.cross.takeAnswer(xid, from, &ev)
			if why != "" {
				if why == notWaiting {
					n.M.Late.Add(1) // answered "unavailable" already; an OPEN's share is told by a repeated OPEN
				} else {
					n.forged.add(n.log, ForgedAnswer, from, why)
				}
				release(&ev)
				continue
			}
			ev.Conn, ev.RecvNs = c.h, c.recvNs
		case event.KOpen, event.KChat:
			ev.Conn = conn.Handle{Gen: xid} // no connection here: the answer goes back by xid
			// A request, as from the ingress: it leaves the ring's headroom
			// to answers, and is answered "overloaded" when it would not.
			if s, ok := n.bus.ClaimRequest(set); ok {
				*s.Event() = ev
				s.Publish()
				continue
			}
			n.M.Refused.Add(1)
			if !n.refuse(&ev) {
				return
			}
			continue
		}
		if err := n.publish(set, &ev); err != nil {
			release(&ev)
			if errors.Is(err, event.ErrNoOwner) {
				continue // it left meanwhile (a move): as misrouted
			}
			return
		}
	}
}

// admit reports whether ev, from gateway from, is one that gateway may
// send; one it may not is counted, as stale (sent before it learnt it lost
// the SET) or as forged.
func (n *Node) admit(from int, ev *event.Event) bool {
	switch why := n.mayNotSend(from, ev); why {
	case "":
		return true
	case stale:
		n.M.Stale.Add(1)
	default:
		n.forged.add(n.log, ForgedEvent, from, why)
	}
	return false
}

// refuse answers request ev from another gateway "overloaded" (OPEN_RESULT
// 5, CHAT_ACK 2), back through the link to its requester's gateway.
func (n *Node) refuse(ev *event.Event) bool {
	release(ev)
	return n.overloaded(crossing{h: ev.Conn, kind: ev.Kind, user: ev.User, peer: ev.Peer, stamp: ev.Stamp, env: ev.Env, recvNs: ev.RecvNs})
}

// overloaded publishes into its requester's SET the "overloaded" answer to
// the OPEN (OPEN_RESULT 5) or CHAT (CHAT_ACK 2) c; false once the ring is
// closing. A SET without an owner this moment (it moves) takes none: its
// connections went with it.
func (n *Node) overloaded(c crossing) bool {
	a := event.Event{Kind: event.KAnswer, User: c.user, Conn: c.h, Stamp: c.stamp, RecvNs: c.recvNs}
	if c.kind == event.KOpen {
		a.SetFrame(proto.AppendOpenResult(a.Out[:0], c.stamp, proto.OpenOverloaded, c.env, 0))
	} else {
		a.SetFrame(proto.AppendChatAck(a.Out[:0], c.stamp, proto.ChatOverloaded, c.peer))
	}
	err := n.publish(n.bus.SETOf(c.user), &a)
	return err == nil || errors.Is(err, event.ErrNoOwner)
}

// publish copies ev into set's ring, waiting for room: an error once the
// ring is closing, or event.ErrNoOwner while the SET has no owner.
func (n *Node) publish(set int, ev *event.Event) error {
	r := n.bus.Ring(set)
	seq, err := r.Claim(1)
	if err != nil {
		return err
	}
	*r.At(seq) = *ev
	r.Publish(seq, seq)
	return nil
}

// sweep answers the crossings past their bound "unavailable".
func (n *Node) sweep() {
	defer n.wg.Done()
	t := time.NewTicker(min(max(n.o.Timeout/20, time.Millisecond), 50*time.Millisecond))
	defer t.Stop()
	var due []expired
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		var ok bool
		if due, ok = n.expire(time.Now().UnixNano(), due[:0]); !ok {
			return
		}
	}
}

// expire answers the crossings due by now "unavailable", using due as
// scratch. False once the rings are closing.
func (n *Node) expire(now int64, due []expired) ([]expired, bool) {
	n.expiring.Lock()
	defer n.expiring.Unlock()
	due = n.cross.expire(now, due)
	return due, n.giveUp(due)
}

// giveUp answers the crossings due "unavailable" (OPEN_RESULT 5, CHAT_ACK
// 2); false once the rings are closing. Under expiring. An OPEN's answer,
// if it comes later, is dropped: a share it drew is its user's, and the
// OPEN sent again is answered "already" with it.
func (n *Node) giveUp(due []expired) bool {
	for _, e := range due {
		n.M.TimedOut.Add(1)
		if !n.overloaded(e.c) {
			return false
		}
	}
	return true
}

// GiveUpSET gives up now the crossings of set's users — answered
// "unavailable" — while this gateway still runs set: the SET is leaving for
// another gateway, and the answers are written before its connections are
// told ERROR 9, so that every request read before ERROR 9 has its answer.
func (n *Node) GiveUpSET(set int) {
	n.expiring.Lock()
	defer n.expiring.Unlock()
	due := n.cross.expireOf(func(user uint32) bool { return n.bus.SETOf(user) == set }, nil)
	n.giveUp(due)
}
