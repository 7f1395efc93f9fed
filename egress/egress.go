// Package egress is the last stage of every SET: the only writer of the
// SET's connections. For each batch the ring hands it, it appends every
// outgoing frame to its connection's pooled output buffer, then writes each
// connection that has output once, so a batch of answers to one connection
// costs one syscall. Writes never block: on EAGAIN the rest stays pending and
// the connection's owner watches it for writability; a connection whose
// backlog passes the limit is cut off: nothing new is added to it, its
// backlog and then ERROR 6 go on being written as its reader makes room, for
// up to drainMax, and then its socket is shut down. After each write it
// publishes the connection's unwritten output (conn.Conn.SetBacklog): the
// session of the SET drops chats to a connection whose backlog is at half
// the limit, so that chats, which the reader did not ask for, never get it
// cut off; its own answers and pushes still can.
//
// It owns the output side of the SET's connections and nothing else: it
// decides no money. A shake envelope whose answer never reached its client
// goes back to the pool (KReturn); an OPEN share whose answer never reached
// its client stays drawn, the opener's, and a repeated OPEN tells it
// (counted: OpenUntold); an ENVELOPE push that never reached its client goes
// back to the session, which keeps it for the next login (KPush,
// PushUndelivered);
// the egress writes only its own group of the SET's counters (package
// ledger), and it never reads a socket: the connection's owner (the ingress)
// does.
//
// It releases a money answer (SHAKE_RESULT 1, OPEN_RESULT 0, SEND_ACK 0, an
// ENVELOPE push: an event with a journal position) only once the journal has
// made its record durable, the way a Disruptor stage gates on its upstream:
// until then it keeps a copy of the event and marks its SET held, and the
// journal's writer, after each round, ticks the held SETs (event.Bus.Tick),
// so the egress looks again without spinning; everything else it writes at
// once. A batch of money answers waits for one round, not one sync each.
// Once the journal has failed, the held answers are answered overloaded
// instead: their changes never became durable.
package egress

import (
	"encoding/binary"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// Egress is the egress stage of one SET. It owns the output side of every
// connection of the SET (conn.Conn's egress fields) and is not safe for
// concurrent use: it runs on its stage goroutine only.
type Egress struct {
	set        int
	bus        *event.Bus
	out        *event.Outbox // for KReturn into its own SET
	c          *ledger.EgressCounters
	maxPending int
	now        func() int64
	appended   func(c *conn.Conn) // after output was appended to c: markDirty, or writeOut with EachFrame

	conns    map[*conn.Conn]struct{} // logged-in connections of the SET, for shutdown
	dirty    []*conn.Conn            // connections with output appended in this batch
	release  []*conn.Conn            // connections to release once this batch is flushed
	draining []drain                 // connections cut off for their backlog, still being written

	j     *journal.Journal // nil: the journal is off
	gated []event.Event    // money answers waiting for their journal record to be durable, in arrival order

	slowOver int64          // ns: a batch whose slowest answer took longer is reported to slow
	slow     func(ns int64) // nil: none is
}

// drain is a connection cut off for its backlog (ERROR 6) whose output,
// the ERROR last, is still being written as its reader makes room: it is
// shut down once that is done, or at until (unix ns).
type drain struct {
	h     conn.Handle
	until int64
}

// drainMax bounds how long a cut-off connection keeps being written to: long
// enough for a slow reader to get its backlog and then the ERROR 6 that says
// why it ends, short enough that one that never reads soon lets go of it. The
// backlog is already there; nothing new is added to it.
const drainMax = 2 * time.Second

// Mode is when the egress writes the answers it appends to a connection.
type Mode uint8

const (
	// Batch writes each connection once per batch, after the whole batch:
	// a batch of answers to one connection costs one write.
	Batch Mode = iota
	// EachFrame writes every answer frame with its own write at once
	// (-egress=frame): the baseline that batching is measured against, kept
	// out of the batched path by being chosen here, once. Same non-blocking
	// rules: on EAGAIN the rest waits for writability, past maxPending
	// ERROR 6.
	EachFrame
)

// New returns the egress stage of SET set. maxPending is the most output
// bytes a connection may have waiting before it is cut off.
func New(set int, bus *event.Bus, l *ledger.Ledger, maxPending int, now func() int64, mode Mode) *Egress {
	e := &Egress{set: set, bus: bus, out: event.NewOutbox(bus, set), c: &l.Egress, maxPending: maxPending,
		now: now, conns: make(map[*conn.Conn]struct{})}
	e.appended = e.markDirty
	if mode == EachFrame {
		e.appended = e.writeOut // may leave output pending (EAGAIN), or cut c off
	}
	return e
}

// WatchSlow has f called, on the SET's goroutine, with the decode → write
// time of the slowest answer of every batch in which one took longer than
// over: f must not block.
func (e *Egress) WatchSlow(over time.Duration, f func(ns int64)) {
	e.slowOver, e.slow = int64(over), f
}

// Handle implements ring.Handler.
func (e *Egress) Handle(b event.Batch) {
	start := e.now()
	e.out.Retry()
	var slowest int64 // of the answers observed in this batch, for WatchSlow
	if len(e.gated) > 0 {
		slowest = e.ungate()
	}
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		if ev.JPos != 0 && ev.OutLen > 0 && !e.j.Durable(ev.JPID, ev.JPos) {
			e.gated = append(e.gated, *ev)
			ev.OutLen = 0 // its latency is observed when it is written
			continue
		}
		switch ev.Kind {
		case event.KLogin:
			if c := ev.Conn.C; ev.Conn.Live() {
				if _, ok := e.conns[c]; !ok {
					e.conns[c] = struct{}{}
					e.c.Conns.Add(1)
				}
			}
			if ev.Conn2.Live() {
				e.fatal(ev.Conn2.C, proto.ErrCodeReplaced)
			}
			e.write(ev.Conn, ev.Frame())
		case event.KShake:
			e.shake(ev)
		case event.KChat:
			e.write(ev.Conn, ev.Frame())
			if c := ev.Conn2.C; c != nil {
				if ev.Conn2.Live() && !c.Dead {
					c.ChatOut += uint32(len(ev.Buf.B)) // before the write, which may publish the backlog (EachFrame)
				}
				e.write(ev.Conn2, ev.Buf.B)
			}
			bytebufferpool.Put(ev.Buf)
			ev.Buf = nil
		case event.KFatal:
			if ev.Conn.Live() {
				e.fatal(ev.Conn.C, ev.Code)
			}
		case event.KWritable:
			if c := ev.Conn.C; ev.Conn.Live() {
				c.Watching = false
				e.markDirty(c)
			}
		case event.KDisconnect:
			if c := ev.Conn.C; ev.Conn.Live() {
				e.disconnect(c)
			}
		case event.KShutdown:
			code := proto.ErrCodeShuttingDown
			if ev.Code != 0 {
				code = ev.Code // ERROR 9: the SET moved to another gateway
			}
			for c := range e.conns {
				e.fatal(c, code)
			}
			e.endDrains(math.MaxInt64) // the server is going: no waiting for slow readers
		case event.KAnswer:
			if ev.Buf == nil {
				e.answer(ev)
				break
			}
			e.write(ev.Conn, ev.Buf.B) // refusals: nothing to give back if c is gone
			bytebufferpool.Put(ev.Buf)
			ev.Buf = nil
		default:
			e.answer(ev)
		}
	}
	e.flush()
	if len(e.gated) > 0 {
		e.bus.MarkHeld(e.set) // the journal's writer ticks this SET once a round is durable
	}
	e.c.Held.Store(int64(len(e.gated) + e.out.Held()))
	now := e.now()
	if len(e.draining) > 0 {
		e.endDrains(now)
		if len(e.draining) > 0 {
			e.bus.MarkHeld(e.set) // a KTick soon, so that drainMax holds in an idle SET
		}
	}
	// Latency runs from the ingress's read (RecvNs: the start of its loop's
	// chunk of reads) to the end of the write, the costliest part: measured
	// after the flush, in a second pass over the batch. Of the answers the
	// stages made: the ingress's batched refusals (Out empty) are not
	// observed.
	for seq := b.Lo; seq <= b.Hi; seq++ {
		if ev := b.At(seq); ev.RecvNs != 0 && ev.OutLen > 0 {
			if k, ok := answered(proto.Type(ev.Out[2])); ok {
				e.observe(&e.c.LatencyBuckets, &e.c.LatencySumNs, k, now-ev.RecvNs)
				e.observe(&e.c.WaitBuckets, &e.c.WaitSumNs, k, start-ev.RecvNs)
				slowest = max(slowest, now-ev.RecvNs)
			}
		}
	}
	if e.slow != nil && slowest > e.slowOver {
		e.slow(slowest)
	}
}

// Journal makes the egress hold each money answer (an event with a journal
// position) until the journal has made its record durable; nil: at once.
func (e *Egress) Journal(j *journal.Journal) { e.j = j }

// ungate writes the held money answers whose records are now durable, in
// the order they came, and returns the longest latency it observed. Once the
// journal has failed (or the record's group: fenced, failed), none will be:
// each is answered overloaded instead.
func (e *Egress) ungate() (slowest int64) {
	failed := e.j.Failed()
	now := int64(0)
	kept := e.gated[:0]
	for i := range e.gated {
		ev := &e.gated[i]
		switch {
		case failed || e.j.Lost(ev.JPID, ev.JPos): // the journal, or the SET's group on JetStream, lost it
			e.refuse(ev)
		case !e.j.Durable(ev.JPID, ev.JPos):
			kept = append(kept, *ev)
			continue
		case ev.Kind == event.KShake:
			e.shake(ev)
		default:
			e.answer(ev)
		}
		if ev.RecvNs != 0 && ev.OutLen > 0 {
			if k, ok := answered(proto.Type(ev.Out[2])); ok {
				if now == 0 {
					now = e.now()
				}
				e.observe(&e.c.LatencyBuckets, &e.c.LatencySumNs, k, now-ev.RecvNs)
				slowest = max(slowest, now-ev.RecvNs)
			}
		}
	}
	clear(e.gated[len(kept):])
	e.gated = kept
	return slowest
}

// refuse answers a held money answer overloaded: its change will never be
// durable. The envelope popped goes back to the pool, as for an answer that
// could not be written; a share drawn needs nothing: not durable, it is no
// one's (a gateway whose journal failed serves its SETs no more).
func (e *Egress) refuse(ev *event.Event) {
	f, n, err := proto.NextResponse(ev.Frame())
	if n == 0 || err != nil {
		return
	}
	switch f.Type {
	case proto.ShakeResult:
		if ev.Kind == event.KShake && ev.Status == proto.ShakeGot { // not a repeated answer: it took nothing
			e.giveBack(ev.Env, ev.Amount)
		}
		ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], f.Stamp, proto.ShakeOverloaded, 0, 0))
	case proto.OpenResult:
		_, env, _ := f.OpenResult()
		ev.SetFrame(proto.AppendOpenResult(ev.Out[:0], f.Stamp, proto.OpenOverloaded, env, 0))
	case proto.SendAck:
		ev.SetFrame(proto.AppendSendAck(ev.Out[:0], f.Stamp, proto.SendOverloaded, 0))
	default: // an ENVELOPE push: its envelope is not durable, so it is not told
		ev.OutLen = 0
		return
	}
	e.write(ev.Conn, ev.Frame())
}

// The latency counters hold one histogram per request kind, KLogin to KPing.
var _ [ledger.RequestTypes]struct{} = [event.KPing - event.KLogin + 1]struct{}{}

// answered returns the kind of request an answer frame answers. The answer
// tells it where the event cannot: an answer made in another SET arrives as
// a KAnswer whatever it answers.
func answered(t proto.Type) (event.Kind, bool) {
	switch t {
	case proto.LoginAck:
		return event.KLogin, true
	case proto.ShakeResult:
		return event.KShake, true
	case proto.OpenResult:
		return event.KOpen, true
	case proto.SendAck:
		return event.KSend, true
	case proto.ChatAck:
		return event.KChat, true
	case proto.Pong:
		return event.KPing, true
	}
	return 0, false
}

// answer writes the answer frame a stage made, if any.
func (e *Egress) answer(ev *event.Event) {
	if ev.OutLen > 0 && !e.write(ev.Conn, ev.Frame()) {
		if ev.Kind == event.KPush {
			if ev.Conn.C != nil { // not a push to someone offline: the session has kept that one
				e.undelivered(ev.User, ev.Conn, ev.Frame())
			}
			return
		}
		e.lost(ev.Frame())
	}
}

// undelivered sends an ENVELOPE push that never reached user's connection h
// back to the session, which keeps it for user's next login as it keeps a
// push to someone offline: the user may still open that envelope.
func (e *Egress) undelivered(user uint32, h conn.Handle, frame []byte) {
	f, n, err := proto.NextResponse(frame)
	if n == 0 || err != nil || f.Type != proto.Envelope {
		return
	}
	env, _, _, _ := f.Envelope()
	r := e.out.Put(e.set) // a push is routed to its user's SET: this one
	r.Kind, r.Status, r.User, r.Env, r.Conn = event.KPush, event.PushUndelivered, user, env, h
	r.SetFrame(append(r.Out[:0], frame...))
	e.out.Done()
}

// shake writes a SHAKE_RESULT. An envelope whose connection is gone goes back
// to the pool instead of being counted as got, unless its SHAKE had a request
// id: the answer kept for that id already tells it to the retry, so it is
// the user's.
func (e *Egress) shake(ev *event.Event) {
	if ev.Status != proto.ShakeGot {
		e.write(ev.Conn, ev.Frame())
		return
	}
	if !e.write(ev.Conn, ev.Frame()) {
		if ev.Req() == 0 {
			e.giveBack(ev.Env, ev.Amount)
			return
		}
		e.c.ShakeUntold.Add(1)
	}
	e.c.Got.Add(1)
	e.c.GotAmount.Add(uint64(ev.Amount))
}

// lost counts an answer frame that will never reach its user if it told a
// share just drawn (OPEN_RESULT 0): the share stays drawn and counted, the
// user's, and a repeated OPEN answers "already" with it. Taking it back
// instead would let another answer that told it (a repeated OPEN on a new
// connection, answered meanwhile) stand beside a second draw.
func (e *Egress) lost(frame []byte) {
	if len(frame) < proto.HeaderLen || proto.Type(frame[2]) != proto.OpenResult {
		return // the cheap test first: most lost frames are not OPEN_RESULTs
	}
	if f, n, err := proto.NextResponse(frame); n > 0 && err == nil {
		if status, _, _ := f.OpenResult(); status == proto.OpenOK {
			e.c.OpenUntold.Add(1)
		}
	}
}

func (e *Egress) giveBack(env uint64, amount uint32) {
	r := e.out.Put(e.set)
	r.Kind, r.Env, r.Amount = event.KReturn, env, amount
	e.out.Done()
	e.c.Returned.Add(1)
}

// write appends frames (one whole frame, or several one after another) to
// h's output and reports whether they were accepted: the connection is still
// open and not cut off.
func (e *Egress) write(h conn.Handle, frames []byte) bool {
	if len(frames) == 0 {
		return true
	}
	if !h.Live() || h.C.Dead {
		for range eachFrame(frames) {
			e.c.Dropped.Add(1)
		}
		return false
	}
	c := h.C
	if c.Out == nil {
		c.Out = bytebufferpool.Get()
	}
	c.Out.B = append(c.Out.B, frames...)
	for typ := range eachFrame(frames) {
		e.c.Frames[ledger.FrameIndex(typ)].Add(1)
	}
	e.appended(c)
	return true
}

// eachFrame yields the type byte of each whole frame in frames.
func eachFrame(frames []byte) func(yield func(byte) bool) {
	return func(yield func(byte) bool) {
		for off := 0; off+proto.HeaderLen <= len(frames); off += max(int(binary.BigEndian.Uint16(frames[off:])), proto.HeaderLen) {
			if !yield(frames[off+2]) {
				return
			}
		}
	}
}

func (e *Egress) markDirty(c *conn.Conn) {
	if !c.Dirty {
		c.Dirty = true
		e.dirty = append(e.dirty, c)
	}
}

// fatal appends ERROR code to c's output and cuts c off: nothing more is
// accepted for it, and after the flush its socket is shut down, so its reader
// sees EOF and publishes KDisconnect.
func (e *Egress) fatal(c *conn.Conn, code uint8) {
	if c.Dead {
		return
	}
	if c.Out == nil {
		c.Out = bytebufferpool.Get()
	}
	c.Out.B = proto.AppendError(c.Out.B, 0, code)
	e.c.Frames[ledger.FrameIndex(0xFF)].Add(1)
	c.Dead = true
	e.markDirty(c)
}

// disconnect forgets c once this batch is flushed: shake envelopes still in
// its unwritten output go back to the pool, then its owner releases it.
func (e *Egress) disconnect(c *conn.Conn) {
	if _, ok := e.conns[c]; ok {
		delete(e.conns, c)
		e.c.Conns.Add(-1)
	}
	c.Dead = true
	e.release = append(e.release, c)
}

// flush writes every dirty connection once, then releases the connections
// that disconnected in this batch (after, so no write can reach a descriptor
// that was closed and reused).
func (e *Egress) flush() {
	for i, c := range e.dirty {
		e.dirty[i] = nil
		c.Dirty = false
		e.writeOut(c)
	}
	e.dirty = e.dirty[:0]
	for i, c := range e.release {
		e.release[i] = nil
		e.unsent(c)
		c.Owner.Release(c)
	}
	e.release = e.release[:0]
}

func (e *Egress) writeOut(c *conn.Conn) {
	for c.Out != nil && c.Sent < len(c.Out.B) && !c.Watching {
		n, err := unix.Write(c.FD, c.Out.B[c.Sent:])
		e.c.Writes.Add(1)
		if n > 0 {
			c.Sent += n
			e.c.Bytes.Add(uint64(n))
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			c.Watching = true
			c.Owner.WatchWritable(c)
		default: // EPIPE, ECONNRESET: the reader will see it too and disconnect
			c.Dead, c.Draining = true, false
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if c.Out != nil && c.Sent == len(c.Out.B) {
		bytebufferpool.Put(c.Out) // idle connections hold no buffer
		c.Out, c.Sent = nil, 0
	}
	// The backlog is judged after the write, so a burst that a reader takes
	// at once is never held against it. A batch (MaxBatch events) can add at
	// most a batch of frames beyond the limit before this check.
	// The ERROR goes behind the backlog, which the socket had no room for:
	// the connection drains (KWritable goes on bringing it here) until its
	// reader has taken both, or drainMax.
	if !c.Dead && c.Out != nil && len(c.Out.B)-c.Sent > e.maxPending {
		e.c.CutOff.Add(1)
		c.Out.B = proto.AppendError(c.Out.B, 0, proto.ErrCodeTooSlow)
		e.c.Frames[ledger.FrameIndex(0xFF)].Add(1)
		c.Dead, c.Draining = true, true
		e.draining = append(e.draining, drain{conn.HandleOf(c), e.now() + int64(drainMax)})
		// Chats and pushes to it from here would be dropped: the session
		// answers them "offline" instead once it knows.
		r := e.out.Put(e.set)
		r.Kind, r.User, r.Conn = event.KCutOff, c.User, conn.HandleOf(c)
		e.out.Done()
	}
	if c.Out != nil {
		c.SetBacklog(len(c.Out.B) - c.Sent) // for the session, which drops chats to a full backlog
	} else {
		c.SetBacklog(0)
	}
	if c.Draining && c.Out == nil {
		c.Draining = false // all written, the ERROR too
	}
	if c.Dead && !c.Draining {
		c.Owner.Shutdown(c)
	}
}

// endDrains forgets the draining connections that are done (or gone), and
// shuts down those whose time is up with output still unwritten.
func (e *Egress) endDrains(now int64) {
	kept := e.draining[:0]
	for _, d := range e.draining {
		switch c := d.h.C; {
		case !d.h.Live() || !c.Draining:
		case now >= d.until:
			c.Draining = false
			c.Owner.Shutdown(c) // what it did not take is given back when it is released
		default:
			kept = append(kept, d)
		}
	}
	clear(e.draining[len(kept):])
	e.draining = kept
}

// unsent returns to the pool every shake envelope whose SHAKE_RESULT had not
// been written whole when c went away, and uncounts it: a user never loses an
// envelope the server counted as handed out. ENVELOPE pushes go back to the
// session, for the next login; OPEN shares stay their openers' (lost).
func (e *Egress) unsent(c *conn.Conn) {
	if c.Out == nil {
		return
	}
	buf, off := c.Out.B, 0
	for off < len(buf) {
		f, n, err := proto.NextResponse(buf[off:])
		if n == 0 || err != nil {
			break // cannot happen: egress wrote these frames itself
		}
		if off+n > c.Sent {
			switch f.Type {
			case proto.ShakeResult:
				if status, env, amount := f.ShakeResult(); status == proto.ShakeGot {
					e.c.Got.Add(^uint64(0))
					e.c.GotAmount.Add(^uint64(amount - 1))
					e.giveBack(env, amount)
				}
			case proto.OpenResult:
				e.lost(buf[off : off+n])
			case proto.Envelope:
				e.undelivered(c.User, conn.HandleOf(c), buf[off:off+n])
			}
		}
		off += n
	}
	bytebufferpool.Put(c.Out)
	c.Out, c.Sent = nil, 0
}

// observe counts ns in the histogram (buckets, sums) of requests of kind k.
func (e *Egress) observe(buckets *[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, sums *[ledger.RequestTypes]atomic.Uint64, k event.Kind, ns int64) {
	if ns < 0 {
		ns = 0
	}
	t := k - event.KLogin
	buckets[t][ledger.LatencyBucket(uint64(ns/int64(time.Microsecond)))].Add(1)
	sums[t].Add(uint64(ns))
}
