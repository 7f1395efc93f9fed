package stages

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// Shake is the stage that owns a SET's pool of shake envelopes: campaigns
// deal batches into it (KDeal), a SHAKE pops one, and an envelope whose
// answer could not be written comes back (KReturn). The pool is a plain FIFO
// owned by this goroutine.
type Shake struct {
	pool envelope.Pool
	c    *ledger.ShakeCounters
	jp   *journal.Producer // nil: the journal is off
	rec  []byte            // a record's payload, reused

	camps     tallies // dealt for each campaign
	shares    shares  // the SET's shares of the campaigns
	lastDealt uint64  // the last envelope id dealt
	ans       answers // SHAKE money answers to request ids, for their retries
	snapOut   func(Part)
}

// NewShake returns the shake stage of a SET, which keeps request ids for
// DefaultRequestWindow.
func NewShake(l *ledger.Ledger) *Shake {
	return &Shake{c: &l.Shake, camps: tallies{}, ans: newAnswers(DefaultRequestWindow, &l.Shake.RequestIDs)}
}

// RequestWindow sets how long the stage keeps request ids, as
// Limits.RequestWindow says; call it before the SET runs.
func (s *Shake) RequestWindow(d time.Duration) {
	s.ans = newAnswers(Limits{RequestWindow: d}.window(), &s.c.RequestIDs)
}

// Journal makes the stage journal its changes to jp; nil leaves it off.
func (s *Shake) Journal(jp *journal.Producer) {
	s.jp, s.rec = jp, make([]byte, 0, 512)
}

// Handle implements ring.Handler.
func (s *Shake) Handle(b event.Batch) {
	touched := false
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		switch ev.Kind {
		case event.KShake:
			s.c.Requests.Add(1)
			req := ev.Req()
			if req != 0 && s.replayed(ev, req) {
				continue
			}
			if s.jp.Failed() { // nothing would become durable: hand out nothing
				ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, proto.ShakeOverloaded, 0, 0))
				continue
			}
			id, amount, ok := s.pool.Pop()
			if !ok {
				s.c.Empty.Add(1)
				ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, proto.ShakeNothing, 0, 0))
				continue
			}
			s.c.Popped.Add(1)
			s.c.PoppedAmount.Add(uint64(amount))
			ev.Status, ev.Env, ev.Amount = proto.ShakeGot, id, amount // egress counts it got, or returns it
			keep := req != 0 && s.ans.on()
			if keep {
				s.ans.put(answer{req: req, env: id, user: ev.User, amount: amount, typ: proto.Shake, status: proto.ShakeGot}, ev.RecvNs/1e9)
			}
			if s.jp != nil {
				typ := RecPop
				s.rec = appendIDAmount(s.rec[:0], id, amount)
				if keep {
					s.rec = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(s.rec, ev.User), req)
					typ = RecPopReq
				}
				ev.JPID, ev.JPos = s.jp.ID(), s.jp.Append(typ, s.rec)
			}
			ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, proto.ShakeGot, id, amount))
			touched = true
		case event.KDeal:
			var sum uint64
			amounts := ev.Buf.B[:4*int(ev.N)]
			if s.jp != nil {
				s.rec = binary.BigEndian.AppendUint32(s.rec[:0], ev.Peer)
				s.rec = binary.BigEndian.AppendUint64(s.rec, ev.Env)
				s.rec = append(s.rec, amounts...)
				s.jp.Append(RecDeal, s.rec)
			}
			for i := 0; i < int(ev.N); i++ {
				a := binary.BigEndian.Uint32(amounts[4*i:])
				s.pool.Push(ev.Env+uint64(i), a)
				sum += uint64(a)
			}
			bytebufferpool.Put(ev.Buf)
			ev.Buf = nil
			s.camps.add(ev.Peer, uint64(ev.N), sum)
			s.lastDealt = max(s.lastDealt, ev.Env+uint64(ev.N)-1)
			s.c.Created.Add(uint64(ev.N))
			s.c.CreatedAmount.Add(sum)
			touched = true
		case event.KShare:
			touched = s.share(ev) || touched
		case event.KSnapshot:
			s.snapshot(ev)
		case event.KReturn:
			if s.jp != nil {
				s.rec = appendIDAmount(s.rec[:0], ev.Env, ev.Amount)
				s.jp.Append(RecReturn, s.rec)
			}
			s.pool.Push(ev.Env, ev.Amount)
			s.ans.returned(ev.Env)
			s.c.Returned.Add(1)
			s.c.ReturnedAmount.Add(uint64(ev.Amount))
			touched = true
		}
	}
	if touched {
		s.jp.Publish()
		s.gauges()
	}
}

// replayed answers a SHAKE with request id req from the answers kept, if
// its id is outside the window or has an answer, and reports whether it
// did. A repeated answer is not counted got again (Status is not ShakeGot),
// and waits, as the first did, until what the stage journalled is durable.
func (s *Shake) replayed(ev *event.Event, req uint64) bool {
	if !s.ans.on() {
		return false
	}
	status, env, amount := proto.ShakeExpired, uint64(0), uint32(0)
	switch e := s.ans.get(ev.User, req); {
	case s.ans.outside(req, ev.RecvNs/1e9) || e != nil && e.typ != proto.Shake:
		s.c.Expired.Add(1)
	case e != nil:
		status, env, amount = e.status, e.env, e.amount
		s.c.Replayed.Add(1)
		if s.jp != nil {
			ev.JPID, ev.JPos = s.jp.ID(), s.jp.Pos()
		}
	default:
		return false
	}
	ev.Status = proto.ShakeNothing
	ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, status, env, amount))
	return true
}

func (s *Shake) gauges() {
	s.c.Pool.Store(uint64(s.pool.Len()))
	s.c.PoolAmount.Store(s.pool.Amount())
}

func appendIDAmount(b []byte, id uint64, amount uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(b, id), amount)
}

// Restore applies one of the stage's journal records at recovery, before
// the SET runs: the pool changes as it did, in the same order, so that a
// replayed pop takes the very envelope it took then (the pool is FIFO).
// egress is the SET's egress counters: an envelope popped and not returned
// was got.
func (s *Shake) Restore(r journal.Record, egress *ledger.EgressCounters) error {
	p := r.Payload
	switch r.Type {
	case RecDeal:
		if len(p) < 12 || (len(p)-12)%4 != 0 {
			return recordError(r, "deal of a broken length")
		}
		first, n := binary.BigEndian.Uint64(p[4:]), (len(p)-12)/4
		var sum uint64
		for i := range n {
			a := binary.BigEndian.Uint32(p[12+4*i:])
			s.pool.Push(first+uint64(i), a)
			sum += uint64(a)
		}
		s.c.Created.Add(uint64(n))
		s.c.CreatedAmount.Add(sum)
		s.camps.add(binary.BigEndian.Uint32(p), uint64(n), sum)
		if n > 0 {
			s.lastDealt = max(s.lastDealt, first+uint64(n)-1)
		}
	case RecPop:
		if len(p) != 12 {
			return recordError(r, "pop of a broken length")
		}
		want, wantAmount := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		id, amount, ok := s.pool.Pop()
		if !ok || id != want || amount != wantAmount {
			return recordError(r, fmt.Sprintf("envelope %#x of %d fen popped, the pool's head is %#x of %d fen (ok %v)",
				want, wantAmount, id, amount, ok))
		}
		s.c.Popped.Add(1)
		s.c.PoppedAmount.Add(uint64(amount))
		egress.Got.Add(1)
		egress.GotAmount.Add(uint64(amount))
	case RecPopReq: // a RecPop · user u32 · req u64
		if len(p) != 12+4+8 {
			return recordError(r, "pop of a broken length")
		}
		if err := s.Restore(journal.Record{Type: RecPop, PID: r.PID, Payload: p[:12]}, egress); err != nil {
			return err
		}
		e := answer{req: binary.BigEndian.Uint64(p[16:]), env: binary.BigEndian.Uint64(p), user: binary.BigEndian.Uint32(p[12:]),
			amount: binary.BigEndian.Uint32(p[8:]), typ: proto.Shake, status: proto.ShakeGot}
		if err := s.ans.restore(e); err != nil {
			return recordError(r, err.Error())
		}
	case RecReturn:
		if len(p) != 12 {
			return recordError(r, "return of a broken length")
		}
		id, amount := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		s.pool.Push(id, amount)
		s.ans.returned(id)
		s.c.Returned.Add(1)
		s.c.ReturnedAmount.Add(uint64(amount))
		egress.Got.Add(^uint64(0))
		egress.GotAmount.Add(^uint64(amount - 1))
	case RecShare, RecShareEnd:
		return s.restoreShare(r)
	default:
		return recordError(r, "not a shake record")
	}
	s.gauges()
	return nil
}
