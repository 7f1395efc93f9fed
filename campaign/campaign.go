// Package campaign runs the admin API's campaigns: producers that create
// envelopes off the hot path, paced exactly (envelope.Pacer), and deal them
// round-robin over the SETs (envelope.Dealer), one ring event per batch.
// It does not touch the pools, the group envelopes or the ledger: what it
// deals reaches them only as events the SETs' stages apply.
//
// One goroutine drives every campaign: each envelope.TickInterval it deals
// what each running campaign's pacer says is due. A goroutine and a ticker
// per campaign cost the scheduler a wake-up per campaign per tick, which
// thousands of campaigns turn into both cores.
//
// Campaigns are bounded three ways: at most Config.MaxRunning run at once;
// shake campaigns deal only while the pools (and the deals on their way to
// them) hold fewer than Config.MaxPool envelopes, send campaigns only while
// fewer than Config.MaxLive group envelopes are live; and only the last
// Config.KeepFinished finished or cancelled campaigns are remembered.
//
// With a journal (Runner.Journal) a campaign's start and cancellation are
// durable before the admin API answers; its progress is not journalled by
// the runner but by the SETs, in the records of what they dealt, each naming
// the campaign (event Peer), so that after a crash Restore resumes each
// campaign at its rate from exactly what was durably dealt: envelopes on
// their way to a SET at the crash are dealt again, none twice.
package campaign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
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

// State is where a campaign is in its life.
type State string

const (
	Running   State = "running"
	Finished  State = "finished"  // every envelope dealt
	Cancelled State = "cancelled" // by Runner.Cancel: what was dealt stays dealt
)

var states = [...]State{Running, Finished, Cancelled}

// Why a running campaign deals less than its pacer says is due.
const (
	notWaiting = iota
	waitPool
	waitHeld
	waitJournal
)

var waitings = [...]string{notWaiting: "", waitPool: "pool full", waitHeld: "envelopes full", waitJournal: "journal failed"}

// Campaign is one running, finished or cancelled campaign. Safe for
// concurrent use.
type Campaign struct {
	ID      int
	Params  Params
	Started time.Time

	// Owned by the runner's goroutine, under mu.
	pacer   envelope.Pacer
	dealer  *envelope.Dealer
	rnd     envelope.Rand
	perTick uint64 // envelopes due in one tick at the campaign's rate, at least 1
	lastDue uint64 // the pacer's Due at the last tick
	n       uint64 // envelopes dealt
	base    uint64 // envelopes dealt before a restart: the pacer counts from there

	// mu is held while the runner deals c and by Cancel, so that nothing is
	// dealt once Cancel has returned.
	mu      sync.Mutex
	dealt   atomic.Uint64 // envelopes handed to the SETs so far
	amount  atomic.Uint64 // their amounts (shake) or totals (send)
	state   atomic.Uint32 // index into states
	waiting atomic.Uint32 // index into waitings
	ended   atomic.Int64  // unix ns when it finished or was cancelled
}

// Status is a campaign's progress, for GET /campaigns.
type Status struct {
	ID      int       `json:"id"`
	Params            // inlined
	Started time.Time `json:"started"`
	Dealt   uint64    `json:"dealt"`
	Amount  uint64    `json:"amount"`
	Done    bool      `json:"done"` // nothing more will be dealt: finished or cancelled
	State   State     `json:"state"`
	// Waiting says why a running campaign deals less than its pacer says is
	// due: "pool full" (shake: the pools hold Config.MaxPool envelopes),
	// "envelopes full" (send: Config.MaxLive group envelopes live) or
	// "journal failed" (nothing dealt could be made durable, so nothing is:
	// a restart resumes from what was).
	Waiting string    `json:"waiting,omitempty"`
	Ended   time.Time `json:"ended,omitzero"` // when it finished or was cancelled
}

// Status snapshots c.
func (c *Campaign) Status() Status {
	// The state first: an ended campaign's counts are final before its state
	// says so, so a status that says ended shows them all.
	state := c.State()
	st := Status{ID: c.ID, Params: c.Params, Started: c.Started, Dealt: c.dealt.Load(),
		Amount: c.amount.Load(), State: state, Waiting: waitings[c.waiting.Load()]}
	st.Done = st.State != Running
	if ns := c.ended.Load(); ns != 0 {
		st.Ended = time.Unix(0, ns)
	}
	return st
}

// State is c's state now.
func (c *Campaign) State() State { return states[c.state.Load()] }

// end moves a running c to s; the caller holds c.mu.
func (c *Campaign) end(s State, now time.Time) {
	c.ended.Store(now.UnixNano())
	c.waiting.Store(notWaiting)
	c.state.Store(uint32(slices.Index(states[:], s)))
}

// Config configures a Runner. The zero values of the bounds mean: no bound.
type Config struct {
	Limits
	// MaxRunning is the most campaigns running at once: Start refuses more
	// with a TooManyError.
	MaxRunning int
	// KeepFinished is how many finished and cancelled campaigns List still
	// shows, the latest ones; older ones are forgotten. Default 1,000.
	KeepFinished int
	// MaxPool bounds the shake envelopes in the SETs' pools: a shake
	// campaign deals only while the envelopes it dealt, less Taken, are
	// fewer. Those are the pools plus the deals still on their way to them,
	// so the pools never exceed MaxPool, except by envelopes that SHAKE
	// answers give back after Taken was read.
	MaxPool uint64
	// Taken is the shake envelopes taken from the SETs' pools and not given
	// back, summed over the SETs (the ledgers' Popped − Returned).
	Taken func() uint64
	// MaxLive bounds the live group envelopes: a send campaign deals only
	// while Live is below it, at most MaxLive − Live a tick.
	MaxLive uint64
	// Live is the live group envelopes of the SETs, summed (the ledgers'
	// Split.Live).
	Live func() uint64
	// Node and Nodes, in a cluster, make the ids this Runner gives unique
	// cluster-wide: campaign ids ≡ Node (mod Nodes), shake envelope ids from
	// producer Node. Nodes 0 means 1: a server alone.
	Node, Nodes int
}

// DefaultKeepFinished is Config.KeepFinished's default: GET /campaigns stays
// ~400 KB at most.
const DefaultKeepFinished = 1000

// TooManyError is Start's answer when Config.MaxRunning campaigns run.
type TooManyError struct{ Max int }

func (e *TooManyError) Error() string {
	return fmt.Sprintf("%d campaigns running, the most allowed (-max-campaigns=%d): wait for one to finish or cancel one", e.Max, e.Max)
}

var (
	ErrNotFound = errors.New("no such campaign")
	ErrFinished = errors.New("campaign already finished")
	ErrClosed   = errors.New("server is shutting down")
	// ErrNotDurable: the journal cannot make the change durable (a write or
	// sync failed), so it is not made.
	ErrNotDurable = errors.New("the journal cannot make changes durable: see the server's log and /healthz")
)

// Runner starts and tracks campaigns, and deals for all of them from one
// goroutine. Safe for concurrent use.
type Runner struct {
	bus  *event.Bus
	cfg  Config
	now  func() time.Time
	tick time.Duration

	// Owned by the dealing goroutine.
	ids        envelope.IDGen // shake ids
	shakeDealt uint64         // shake envelopes published in all
	rotate     int            // the campaign dealt first at the next tick: each gets the first share of the room in turn

	mu       sync.Mutex
	nextID   int
	running  []*Campaign
	finished []*Campaign // oldest first, at most cfg.KeepFinished
	byID     map[int]*Campaign
	started  bool // the dealing goroutine
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   bool

	jn journalled
}

// NewRunner returns a Runner dealing into bus's SETs.
func NewRunner(bus *event.Bus, cfg Config) (*Runner, error) {
	cfg.Nodes = max(cfg.Nodes, 1)
	ids, err := envelope.NewShakeIDGen(cfg.Node, time.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	if cfg.KeepFinished == 0 {
		cfg.KeepFinished = DefaultKeepFinished
	}
	if cfg.MaxPool > 0 && cfg.Taken == nil || cfg.MaxLive > 0 && cfg.Live == nil {
		return nil, errors.New("campaign: a MaxPool needs Taken and a MaxLive needs Live")
	}
	return &Runner{bus: bus, cfg: cfg, now: time.Now, tick: time.Duration(envelope.TickInterval),
		ids: ids, byID: map[int]*Campaign{}, stop: make(chan struct{})}, nil
}

// Start validates p and starts a campaign.
func (r *Runner) Start(p Params) (*Campaign, error) {
	return r.StartAs(0, p)
}

// ReserveID takes a new id, for a campaign StartAs starts under it (in a
// cluster: this gateway's part of a campaign created here).
func (r *Runner) ReserveID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.newID()
	r.nextID = id
	return id
}

// newID returns the first id above every id given that is this Runner's
// (≡ Node mod Nodes).
func (r *Runner) newID() int {
	n := r.cfg.Nodes
	id := r.nextID + 1
	return id + ((r.cfg.Node-id)%n+n)%n
}

// StartAs starts campaign p with the given id, chosen by the gateway of a
// cluster where it was created (0: a new id of this Runner's).
func (r *Runner) StartAs(id int, p Params) (*Campaign, error) {
	if err := p.Validate(r.cfg.Limits); err != nil {
		return nil, err
	}
	dealer, err := envelope.NewDealer(max(1, len(r.bus.Local())), MaxBatch) // deal follows Local
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, ErrClosed
	case r.cfg.MaxRunning > 0 && len(r.running) >= r.cfg.MaxRunning:
		return nil, &TooManyError{Max: r.cfg.MaxRunning}
	}
	if id == 0 {
		id = r.newID()
	} else if r.byID[id] != nil {
		return nil, fmt.Errorf("campaign %d exists already", id)
	}
	r.nextID = max(r.nextID, id)
	now := r.now()
	c := &Campaign{ID: id, Params: p, Started: now,
		pacer:   envelope.NewPacer(now.UnixNano(), p.Rate, p.Total),
		dealer:  dealer,
		rnd:     envelope.NewRand(uint64(now.UnixNano()) ^ uint64(id)),
		perTick: max(1, perTick(p.Rate, envelope.TickInterval)),
	}
	if err := r.jn.record(RecStarted, startedRecord(c), true, func() {
		r.running = append(r.running, c)
		r.byID[c.ID] = c
	}); err != nil {
		return nil, err // durable before it deals: the SETs' records of its deals name it
	}
	if !r.started {
		r.started = true
		r.wg.Add(1)
		go r.loop()
	}
	return c, nil
}

// perTick is ⌈rate·tick/1s⌉: what falls due in one tick.
func perTick(rate uint64, tick time.Duration) uint64 {
	return (rate*uint64(tick) + uint64(time.Second) - 1) / uint64(time.Second)
}

// List returns the status of every running campaign and of the latest
// finished or cancelled ones, by id.
func (r *Runner) List() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.running)+len(r.finished))
	for _, c := range r.finished {
		out = append(out, c.Status())
	}
	for _, c := range r.running {
		out = append(out, c.Status())
	}
	slices.SortFunc(out, func(a, b Status) int { return a.ID - b.ID })
	return out
}

// Running is the number of campaigns running.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// Cancel stops campaign id: once it returns nothing more is dealt; what was
// dealt stays in the SETs. It returns the campaign's status, and ErrNotFound
// for an id never started or long forgotten, ErrFinished (with the status)
// for a campaign that dealt everything. Cancelling a cancelled campaign
// returns its status again.
func (r *Runner) Cancel(id int) (Status, error) {
	r.mu.Lock()
	c := r.byID[id]
	r.mu.Unlock()
	if c == nil {
		return Status{}, ErrNotFound
	}
	c.mu.Lock()
	switch c.State() {
	case Finished:
		c.mu.Unlock()
		return c.Status(), ErrFinished
	case Running:
		now := r.now()
		if err := r.jn.record(RecCancelled, endRecord(c.ID, now), true, func() { c.end(Cancelled, now) }); err != nil {
			c.mu.Unlock()
			return c.Status(), err
		}
		c.mu.Unlock()
		r.retire(c)
	default:
		c.mu.Unlock()
	}
	return c.Status(), nil
}

// retire moves c from the running to the finished list, forgetting the
// oldest finished campaign past cfg.KeepFinished.
func (r *Runner) retire(c *Campaign) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.running, c)
	if i < 0 {
		return
	}
	r.running = slices.Delete(r.running, i, i+1)
	r.finished = append(r.finished, c)
	if drop := len(r.finished) - r.cfg.KeepFinished; drop > 0 {
		for _, old := range r.finished[:drop] {
			delete(r.byID, old.ID)
		}
		r.finished = slices.Delete(r.finished, 0, drop)
	}
}

// Close stops dealing and waits for the dealing goroutine to return.
func (r *Runner) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// loop is the dealing goroutine: every tick, each running campaign deals
// what its pacer says is due, within the budgets.
func (r *Runner) loop() {
	defer r.wg.Done()
	t := time.NewTicker(r.tick)
	defer t.Stop()
	var running []*Campaign
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			running = append(running[:0], r.running...)
			r.mu.Unlock()
			if len(running) > 0 {
				r.dealTick(running, r.now())
			}
		}
	}
}

// room is what a budget still allows this tick: max − used, and unbounded
// (MaxUint64) when max is 0.
func room(max, used uint64) uint64 {
	switch {
	case max == 0:
		return math.MaxUint64
	case used >= max:
		return 0
	}
	return max - used
}

// dealTick deals one tick for every campaign in cs.
func (r *Runner) dealTick(cs []*Campaign, now time.Time) {
	if r.jn.jp.Failed() {
		for _, c := range cs {
			c.waiting.Store(waitJournal)
		}
		return
	}
	var pool, held uint64 = math.MaxUint64, math.MaxUint64
	if r.cfg.MaxPool > 0 {
		// Read once a tick: Taken only grows meanwhile, so the estimate
		// (what was dealt less what was taken) errs on the full side.
		taken := r.cfg.Taken()
		pool = room(r.cfg.MaxPool, r.shakeDealt-min(taken, r.shakeDealt))
	}
	if r.cfg.MaxLive > 0 {
		held = room(r.cfg.MaxLive, r.cfg.Live())
	}
	r.rotate %= len(cs)
	first := r.rotate
	r.rotate++
	for i := range cs {
		c := cs[(first+i)%len(cs)]
		budget, why := &pool, uint32(waitPool)
		if c.Params.Kind == Send {
			budget, why = &held, waitHeld
		}
		if r.step(c, now, budget, why) {
			c.mu.Lock()
			if c.State() == Running {
				// The record is for its end time: recovery sees it dealt in full anyway.
				r.jn.record(RecFinished, endRecord(c.ID, now), false, func() { c.end(Finished, now) })
			}
			c.mu.Unlock()
			r.retire(c)
		}
	}
}

// step deals c's share of this tick from *budget and reports whether c has
// dealt everything. A campaign deals what fell due since the last tick and
// at most a tick's worth of what it was due earlier but could not deal
// within the budget (perTick: ⌈rate × tick⌉, at least one envelope), so a
// campaign that waited catches up at about twice its rate (at least one
// envelope a tick at low rates), never in one burst. Without a wait this is exactly the pacer's Due.
func (r *Runner) step(c *Campaign, now time.Time, budget *uint64, why uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.State() != Running {
		return false
	}
	due := c.base + c.pacer.Due(now.UnixNano())
	fresh, behind := due-c.lastDue, c.lastDue-c.n
	c.lastDue = due
	want := fresh + min(behind, c.perTick)
	give := min(want, *budget)
	if give < want {
		c.waiting.Store(why)
	} else {
		c.waiting.Store(notWaiting)
	}
	if give > 0 {
		*budget -= give
		r.deal(c, give)
	}
	return c.n == c.Params.Total
}

func (r *Runner) deal(c *Campaign, n uint64) {
	p := c.Params
	span := uint64(p.Max-p.Min) + 1
	draw := func() uint32 { return p.Min + uint32(c.rnd.Uint64n(span)) }
	local := r.bus.Local()
	if len(local) == 0 {
		return // no SET runs here now: dealt once one does
	}
	if len(local) != c.dealer.Sets() { // SETs moved here or away
		c.dealer.Resize(len(local))
	}
	c.dealer.Deal(n, func(i int, count uint32) {
		set := local[i]
		switch p.Kind {
		case Shake: // one event carries the whole batch
			var sum uint64
			if !r.publish(set, func(ev *event.Event) {
				ev.Kind, ev.N, ev.Peer = event.KDeal, uint16(count), uint32(c.ID)
				ev.Env = r.ids.Reserve(uint64(count))
				ev.Buf = bytebufferpool.Get()
				for range count {
					a := draw()
					ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, a)
					sum += uint64(a)
				}
			}) {
				return
			}
			r.shakeDealt += uint64(count)
			c.dealtN(uint64(count), sum)
		case Send: // one event per envelope: the SET picks each one's recipients among its online users
			for range count {
				total := draw()
				if !r.publish(set, func(ev *event.Event) {
					ev.Kind, ev.N, ev.Total, ev.Peer = event.KSystemSend, p.Recipients, total, uint32(c.ID)
				}) {
					return
				}
				c.dealtN(1, uint64(total))
			}
		}
	})
}

// dealtN counts n envelopes of the given amount as dealt.
func (c *Campaign) dealtN(n, amount uint64) {
	c.n += n
	c.amount.Add(amount)
	c.dealt.Add(n)
}

// publish claims a slot in set's ring, waiting for room if need be (a
// producer may wait; no stage ever waits for a producer), fills and publishes
// it. It gives up (false) only when the ring is closing.
func (r *Runner) publish(set int, fill func(*event.Event)) bool {
	rg := r.bus.Ring(set)
	seq, err := rg.Claim(1)
	if err != nil {
		return false
	}
	ev := rg.At(seq)
	*ev = event.Event{}
	fill(ev)
	rg.Publish(seq, seq)
	return true
}
