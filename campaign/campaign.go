// Package campaign runs the admin API's campaigns: producers that create
// envelopes off the hot path, paced exactly (envelope.Pacer), and deal them
// round-robin over the SETs (envelope.Dealer), one ring event per batch.
package campaign

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"hongbao/envelope"
	"hongbao/event"
)

// MaxBatch is the most shake envelopes one KDeal event carries.
const MaxBatch = 64

// Kind is a campaign's kind.
type Kind string

const (
	Shake Kind = "shake" // shake envelopes into the SETs' pools
	Send  Kind = "send"  // system group envelopes to online users
)

// Params are a campaign's parameters, as the admin API takes them.
type Params struct {
	Kind       Kind   `json:"kind"`
	Rate       uint64 `json:"rate"`  // envelopes per second
	Total      uint64 `json:"total"` // envelopes in all
	Min        uint32 `json:"min"`   // amount (shake) or total (send) in fen, inclusive
	Max        uint32 `json:"max"`
	Recipients uint16 `json:"recipients,omitempty"` // send: shares per envelope
}

// Limits bound what a campaign may ask.
type Limits struct {
	MaxRate   uint64 // per second
	MaxTotal  uint64 // envelopes
	MaxShares uint16 // recipients of a send envelope
	MaxAmount uint32 // fen, per envelope
}

// Validate reports the first parameter out of bounds, naming it.
func (p Params) Validate(l Limits) error {
	switch {
	case p.Rate < 1 || p.Rate > l.MaxRate:
		return fmt.Errorf("rate=%d: want 1..%d", p.Rate, l.MaxRate)
	case p.Total < 1 || p.Total > l.MaxTotal:
		return fmt.Errorf("total=%d: want 1..%d", p.Total, l.MaxTotal)
	case p.Min < 1 || p.Min > l.MaxAmount:
		return fmt.Errorf("min=%d: want 1..%d", p.Min, l.MaxAmount)
	case p.Max < p.Min || p.Max > l.MaxAmount:
		return fmt.Errorf("max=%d: want min..%d", p.Max, l.MaxAmount)
	}
	if p.Kind == Send {
		switch {
		case p.Recipients < 1 || p.Recipients > l.MaxShares:
			return fmt.Errorf("recipients=%d: want 1..%d", p.Recipients, l.MaxShares)
		case p.Min < uint32(p.Recipients):
			return fmt.Errorf("min=%d: want ≥ recipients (%d), every share is at least 1 fen", p.Min, p.Recipients)
		}
	}
	return nil
}

// Campaign is one running or finished campaign. Safe for concurrent use.
type Campaign struct {
	ID      int
	Params  Params
	Started time.Time
	dealt   atomic.Uint64 // envelopes handed to the SETs so far
	amount  atomic.Uint64 // their amounts (shake) or totals (send)
	done    atomic.Bool
}

// Status is a campaign's progress, for GET /campaigns.
type Status struct {
	ID      int       `json:"id"`
	Params            // inlined
	Started time.Time `json:"started"`
	Dealt   uint64    `json:"dealt"`
	Amount  uint64    `json:"amount"`
	Done    bool      `json:"done"`
}

// Status snapshots c.
func (c *Campaign) Status() Status {
	return Status{ID: c.ID, Params: c.Params, Started: c.Started, Dealt: c.dealt.Load(),
		Amount: c.amount.Load(), Done: c.done.Load()}
}

// Runner starts and tracks campaigns. Safe for concurrent use.
type Runner struct {
	bus    *event.Bus
	limits Limits
	now    func() time.Time
	tick   time.Duration

	mu     sync.Mutex
	list   []*Campaign
	ids    envelope.IDGen // shake ids: one generator, shared under mu (per tick, not per envelope)
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

// NewRunner returns a Runner dealing into bus's SETs.
func NewRunner(bus *event.Bus, l Limits) (*Runner, error) {
	ids, err := envelope.NewShakeIDGen(0, time.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	return &Runner{bus: bus, limits: l, now: time.Now, tick: time.Duration(envelope.TickInterval),
		ids: ids, stop: make(chan struct{})}, nil
}

// Start validates p and starts a campaign.
func (r *Runner) Start(p Params) (*Campaign, error) {
	if err := p.Validate(r.limits); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("server is shutting down")
	}
	c := &Campaign{ID: len(r.list) + 1, Params: p, Started: r.now()}
	r.list = append(r.list, c)
	r.wg.Add(1)
	go r.run(c)
	return c, nil
}

// List returns every campaign's status, oldest first.
func (r *Runner) List() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, len(r.list))
	for i, c := range r.list {
		out[i] = c.Status()
	}
	return out
}

// Close stops every campaign and waits for its producer to return.
func (r *Runner) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// run is a campaign's producer: every tick it deals what the pacer says is due.
func (r *Runner) run(c *Campaign) {
	defer r.wg.Done()
	defer c.done.Store(true)
	pacer := envelope.NewPacer(c.Started.UnixNano(), c.Params.Rate, c.Params.Total)
	dealer, err := envelope.NewDealer(r.bus.Sets(), MaxBatch)
	if err != nil {
		panic("BUG: " + err.Error())
	}
	rnd := envelope.NewRand(uint64(c.Started.UnixNano()) ^ uint64(c.ID))
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for dealt := uint64(0); dealt < c.Params.Total; {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			due := pacer.Due(now.UnixNano())
			if due > dealt {
				r.deal(c, dealer, &rnd, due-dealt)
				dealt = due
			}
		}
	}
}

func (r *Runner) deal(c *Campaign, dealer *envelope.Dealer, rnd *envelope.Rand, n uint64) {
	p := c.Params
	span := uint64(p.Max-p.Min) + 1
	draw := func() uint32 { return p.Min + uint32(rnd.Uint64n(span)) }
	dealer.Deal(n, func(set int, count uint32) {
		switch p.Kind {
		case Shake: // one event carries the whole batch
			var sum uint64
			r.publish(set, func(ev *event.Event) {
				ev.Kind, ev.N = event.KDeal, uint16(count)
				r.mu.Lock()
				ev.Env = r.ids.Reserve(uint64(count))
				r.mu.Unlock()
				ev.Buf = bytebufferpool.Get()
				for range count {
					a := draw()
					ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, a)
					sum += uint64(a)
				}
			})
			c.amount.Add(sum)
		case Send: // one event per envelope: the SET picks each one's recipients among its online users
			for range count {
				total := draw()
				r.publish(set, func(ev *event.Event) {
					ev.Kind, ev.N, ev.Total = event.KSystemSend, p.Recipients, total
				})
				c.amount.Add(uint64(total))
			}
		}
		c.dealt.Add(uint64(count))
	})
}

// publish claims a slot in set's ring, waiting for room if need be (a
// producer may wait; no stage ever waits for a producer), fills and publishes
// it. It gives up only when the ring is closing.
func (r *Runner) publish(set int, fill func(*event.Event)) {
	rg := r.bus.Ring(set)
	seq, err := rg.Claim(1)
	if err != nil {
		return
	}
	ev := rg.At(seq)
	*ev = event.Event{}
	fill(ev)
	rg.Publish(seq, seq)
}
