package stages

import (
	"encoding/binary"

	"github.com/valyala/bytebufferpool"

	"hongbao/envelope"
	"hongbao/event"
	"hongbao/ledger"
	"hongbao/proto"
)

// Shake is the stage that owns a SET's pool of shake envelopes: campaigns
// deal batches into it (KDeal), a SHAKE pops one, and an envelope whose
// answer could not be written comes back (KReturn). The pool is a plain FIFO
// owned by this goroutine.
type Shake struct {
	pool envelope.Pool
	c    *ledger.ShakeCounters
}

// NewShake returns the shake stage of a SET.
func NewShake(l *ledger.Ledger) *Shake { return &Shake{c: &l.Shake} }

// Handle implements ring.Handler.
func (s *Shake) Handle(b event.Batch) {
	touched := false
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		switch ev.Kind {
		case event.KShake:
			s.c.Requests.Add(1)
			id, amount, ok := s.pool.Pop()
			if !ok {
				s.c.Empty.Add(1)
				ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, proto.ShakeNothing, 0, 0))
				continue
			}
			s.c.Popped.Add(1)
			s.c.PoppedAmount.Add(uint64(amount))
			ev.Status, ev.Env, ev.Amount = proto.ShakeGot, id, amount // egress counts it got, or returns it
			ev.SetFrame(proto.AppendShakeResult(ev.Out[:0], ev.Stamp, proto.ShakeGot, id, amount))
			touched = true
		case event.KDeal:
			var sum uint64
			amounts := ev.Buf.B
			for i := 0; i < int(ev.N); i++ {
				a := binary.BigEndian.Uint32(amounts[4*i:])
				s.pool.Push(ev.Env+uint64(i), a)
				sum += uint64(a)
			}
			bytebufferpool.Put(ev.Buf)
			ev.Buf = nil
			s.c.Created.Add(uint64(ev.N))
			s.c.CreatedAmount.Add(sum)
			touched = true
		case event.KReturn:
			s.pool.Push(ev.Env, ev.Amount)
			s.c.Returned.Add(1)
			s.c.ReturnedAmount.Add(uint64(ev.Amount))
			touched = true
		}
	}
	if touched {
		s.c.Pool.Store(uint64(s.pool.Len()))
		s.c.PoolAmount.Store(s.pool.Amount())
	}
}
