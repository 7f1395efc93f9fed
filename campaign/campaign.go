// Package campaign runs the admin API's campaigns: producers that create
// envelopes off the hot path, paced exactly (envelope.Pacer), and deal them
// into the SETs, one ring event per batch. It does not touch the pools, the
// group envelopes or the ledger: what it deals reaches them only as events
// the SETs' stages apply.
//
// A campaign is dealt by shares: each SET's share of its rate and its total
// (ShareOf) is the SET's own state — taken by a KShare event the SET
// journals, with what it dealt, and ended by another — so that whichever
// gateway runs a SET deals what is left of its share: a campaign reaches
// its total through restarts, failovers and moves. A Runner deals the
// shares of the SETs run here: Adopt gives it a SET's, read from the SET
// before it runs; a SET that left is no longer dealt.
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
// the runner but by the SETs, in their shares and the records of what they
// dealt, each naming the campaign (event Peer), so that after a crash each
// share resumes at its rate from exactly what was durably dealt: envelopes
// on their way to a SET at the crash are dealt again, none twice.
package campaign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/stages"
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

// ShareOf is SET set's share of campaign p over sets SETs: its part of the
// rate and the total, rounded so that the shares add up to p's exactly. A
// share with envelopes but a rate under 1 a second deals 1 a second.
func ShareOf(p Params, set, sets int) stages.Share {
	split := func(x uint64) uint64 {
		return x*uint64(set+1)/uint64(sets) - x*uint64(set)/uint64(sets)
	}
	sh := stages.Share{Send: p.Kind == Send, Rate: split(p.Rate), Total: split(p.Total), Min: p.Min, Max: p.Max, Recipients: p.Recipients}
	if sh.Total > 0 && sh.Rate == 0 {
		sh.Rate = 1
	}
	return sh
}

// paramsOf is the Params of one share, for a campaign known only by a
// SET's share of it.
func paramsOf(sh stages.Share) Params {
	k := Shake
	if sh.Send {
		k = Send
	}
	return Params{Kind: k, Rate: sh.Rate, Total: sh.Total, Min: sh.Min, Max: sh.Max, Recipients: sh.Recipients}
}

// Campaign is one running, finished or cancelled campaign. Safe for
// concurrent use.
type Campaign struct {
	ID      int
	Params  Params // the whole campaign's
	Started time.Time
	// partial: known here only by the shares of SETs that arrived (its
	// start not heard yet): Params is one share's.
	partial bool
	local   func(set int) bool // whether SET set runs here

	// mu is held while the runner deals c, by Cancel and by Adopt, so that
	// nothing is dealt once Cancel has returned.
	mu    sync.Mutex
	parts []*part // the shares of the SETs run here, by SET; nil for the others
	// final: what it dealt when it ended, in all (a restart's from the
	// runner's record; the SETs may since have forgotten their shares)
	finalN, finalAmount uint64
	hasFinal            bool
	recorded            bool // final is the runner's record's, not the SETs' here

	state   atomic.Uint32 // index into states
	waiting atomic.Uint32 // index into waitings
	ended   atomic.Int64  // unix ns when it finished or was cancelled
}

// part is one SET's share of a campaign, as the runner deals it.
type part struct {
	set       int
	share     stages.Share
	told      bool // the SET holds the share: taken by a KShare the runner published, or found there
	ended     bool // the SET holds it ended
	n, amount uint64
	pacer     envelope.Pacer
	rnd       envelope.Rand
	perTick   uint64 // envelopes due in one tick at the share's rate, at least 1
	lastDue   uint64 // the pacer's Due at the last tick
	base      uint64 // dealt before the runner took the share on: the pacer counts from there
}

func newPart(set, id int, sh stages.Share, n, amount uint64, now time.Time) *part {
	return &part{set: set, share: sh, n: n, amount: amount, base: n, lastDue: n,
		pacer:   envelope.NewPacer(now.UnixNano(), sh.Rate, sh.Total-min(n, sh.Total)),
		rnd:     envelope.NewRand(uint64(now.UnixNano()) ^ uint64(id)<<20 ^ uint64(set)),
		perTick: max(1, perTick(sh.Rate, envelope.TickInterval))}
}

// Status is a campaign's progress, for GET /campaigns.
type Status struct {
	ID      int       `json:"id"`
	Params            // inlined
	Started time.Time `json:"started"`
	// Dealt and Amount are what the SETs run here dealt of it, all of them
	// on a server alone; summed over a cluster's gateways, the campaign's.
	Dealt  uint64 `json:"dealt"`
	Amount uint64 `json:"amount"`
	// Sets is how many SETs run here hold a share of it.
	Sets  int   `json:"sets"`
	Done  bool  `json:"done"` // nothing more will be dealt here: finished or cancelled
	State State `json:"state"`
	// Waiting says why a running campaign deals less than its pacer says is
	// due: "pool full" (shake: the pools hold Config.MaxPool envelopes),
	// "envelopes full" (send: Config.MaxLive group envelopes live) or
	// "journal failed" (nothing dealt could be made durable, so nothing is:
	// a restart resumes from what was).
	Waiting string    `json:"waiting,omitempty"`
	Ended   time.Time `json:"ended,omitzero"` // when it finished or was cancelled
}

// Status snapshots c.
func (c *Campaign) Status() Status { return c.status(c.local) }

// status snapshots c; local says which SETs run here.
func (c *Campaign) status(local func(int) bool) Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{ID: c.ID, Params: c.Params, Started: c.Started, State: c.State(), Waiting: waitings[c.waiting.Load()]}
	if c.hasFinal {
		st.Dealt, st.Amount = c.finalN, c.finalAmount
	} else {
		for p := range c.held() {
			if local(p.set) {
				st.Dealt += p.n
				st.Amount += p.amount
			}
		}
	}
	for p := range c.held() {
		if local(p.set) {
			st.Sets++
		}
	}
	st.Done = st.State != Running
	if ns := c.ended.Load(); ns != 0 {
		st.Ended = time.Unix(0, ns)
	}
	return st
}

// State is c's state now.
func (c *Campaign) State() State { return states[c.state.Load()] }

// held yields c's shares, in the order of their SETs; the caller holds c.mu.
func (c *Campaign) held() iter.Seq[*part] {
	return func(yield func(*part) bool) {
		for _, p := range c.parts {
			if p != nil && !yield(p) {
				return
			}
		}
	}
}

// end moves a running c to s; the caller holds c.mu.
func (c *Campaign) end(s State, now time.Time, local func(int) bool) {
	c.finalN, c.finalAmount = 0, 0
	for p := range c.held() {
		if local(p.set) {
			c.finalN += p.n
			c.finalAmount += p.amount
		}
	}
	c.hasFinal = true
	c.ended.Store(now.UnixNano())
	c.waiting.Store(notWaiting)
	c.state.Store(uint32(slices.Index(states[:], s)))
}

// resume moves a finished c back to running: a SET arrived with its share
// not dealt in full. The caller holds c.mu.
func (c *Campaign) resume() {
	c.hasFinal = false
	c.ended.Store(0)
	c.state.Store(uint32(slices.Index(states[:], Running)))
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
	// MaxPool bounds the shake envelopes in the pools of the SETs run here:
	// a shake campaign deals only while the envelopes dealt into them, less
	// Taken, are fewer. Those are the pools plus the deals still on their
	// way to them, so the pools never exceed MaxPool, except by envelopes
	// that SHAKE answers give back after Taken was read.
	MaxPool uint64
	// Taken is the shake envelopes taken from SET set's pool and not given
	// back (its ledger's Popped − Returned).
	Taken func(set int) uint64
	// MaxLive bounds the live group envelopes: a send campaign deals only
	// while Live is below it, at most MaxLive − Live a tick.
	MaxLive uint64
	// Live is the live group envelopes of the SETs, summed (the ledgers'
	// Split.Live).
	Live func() uint64
	// Node and Nodes, in a cluster whose gateways tell each other of their
	// campaigns, make the campaign ids this Runner gives unique
	// cluster-wide: ≡ Node (mod Nodes). Nodes 0 means 1: a server alone.
	// Shake envelope ids are each SET's (envelope.NewShakeIDGen).
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
	rotate int // the campaign dealt first at the next tick: each gets the first share of the room in turn

	idsMu sync.Mutex       // the dealing goroutine's, but for Adopt's start past a SET's last deal
	ids   []envelope.IDGen // each SET's shake ids

	// dealtTo is, per SET, the shake envelopes dealt into it: the stages'
	// count at Adopt, then the runner's.
	dealtTo []atomic.Uint64
	// arriving: given by Adopt and not yet routed here; its shares count
	// as running.
	arriving []atomic.Bool

	mu       sync.Mutex
	nextID   int
	running  []*Campaign
	finished []*Campaign // oldest first, at most cfg.KeepFinished
	byID     map[int]*Campaign
	adopted  map[int]uint32 // the SETs given by Adopt, with the campaign up to which each forgot its ended shares
	toEnd    []*Campaign    // cancelled campaigns whose shares a SET given by Adopt holds running
	started  bool           // the dealing goroutine
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   bool

	jn journalled
}

// NewRunner returns a Runner dealing into bus's SETs.
func NewRunner(bus *event.Bus, cfg Config) (*Runner, error) {
	cfg.Nodes = max(cfg.Nodes, 1)
	ids := make([]envelope.IDGen, bus.Sets())
	for set := range ids {
		var err error
		if ids[set], err = envelope.NewShakeIDGen(set, time.Now().UnixNano()); err != nil {
			return nil, err
		}
	}
	if cfg.KeepFinished == 0 {
		cfg.KeepFinished = DefaultKeepFinished
	}
	if cfg.MaxPool > 0 && cfg.Taken == nil || cfg.MaxLive > 0 && cfg.Live == nil {
		return nil, errors.New("campaign: a MaxPool needs Taken and a MaxLive needs Live")
	}
	return &Runner{bus: bus, cfg: cfg, now: time.Now, tick: time.Duration(envelope.TickInterval),
		ids: ids, byID: map[int]*Campaign{}, adopted: map[int]uint32{}, stop: make(chan struct{}),
		dealtTo: make([]atomic.Uint64, bus.Sets()), arriving: make([]atomic.Bool, bus.Sets())}, nil
}

// local reports whether SET set runs here and was given by Adopt.
func (r *Runner) local(set int) bool { return r.bus.IsLocal(set) }

// Start validates p and starts a campaign.
func (r *Runner) Start(p Params) (*Campaign, error) {
	return r.StartAs(0, p)
}

// ReserveID takes a new id, for a campaign StartAs starts under it (in a
// cluster: a campaign created here).
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
// cluster where it was created (0: a new id of this Runner's): each SET
// given by Adopt that holds no share of it takes its share.
func (r *Runner) StartAs(id int, p Params) (*Campaign, error) {
	if err := p.Validate(r.cfg.Limits); err != nil {
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
	}
	c := r.byID[id]
	if c != nil && !c.partial {
		return nil, fmt.Errorf("campaign %d exists already", id)
	}
	r.nextID = max(r.nextID, id)
	now := r.now()
	fresh := c == nil
	if fresh {
		c = &Campaign{ID: id, parts: make([]*part, len(r.dealtTo)), local: r.local}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Params, c.Started, c.partial = p, now, false
	err := r.jn.record(RecStarted, startedRecord(c), true, func() {
		if fresh {
			r.running = append(r.running, c)
			r.byID[c.ID] = c
		}
		for set, forgot := range r.adopted {
			r.addPart(c, set, forgot, 0, 0, now)
		}
	})
	if err != nil {
		return nil, err // durable before it deals: the SETs' records of its deals name it
	}
	r.startLoop()
	return c, nil
}

// addPart gives c a share of set, unless the SET holds one or forgot it
// (id ≤ forgot): n and amount, what the SET dealt of it already (a SET
// journalled by an earlier version holds tallies, not shares). The caller
// holds r.mu and c.mu.
func (r *Runner) addPart(c *Campaign, set int, forgot uint32, n, amount uint64, now time.Time) {
	if c.parts[set] != nil || uint32(c.ID) <= forgot || c.State() == Cancelled {
		return
	}
	sh := ShareOf(c.Params, set, len(r.dealtTo))
	if sh.Total == 0 {
		return
	}
	c.parts[set] = newPart(set, c.ID, sh, n, amount, now)
}

func (r *Runner) startLoop() {
	if !r.started {
		r.started = true
		r.wg.Add(1)
		go r.loop()
	}
}

// perTick is ⌈rate·tick/1s⌉: what falls due in one tick.
func perTick(rate uint64, tick time.Duration) uint64 {
	return (rate*uint64(tick) + uint64(time.Second) - 1) / uint64(time.Second)
}

// Adopt gives the runner SET set, about to run here, with what it holds of
// the campaigns (read from it while it is stopped): its shares go on from
// what it dealt, a share it has not taken of a running campaign is given to
// it, and a share of a cancelled one is ended. What the runner knew of the
// SET before (it ran here earlier) is dropped.
func (r *Runner) Adopt(set int, h stages.Campaigns) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adopted[set] = h.Forgotten
	r.dealtTo[set].Store(h.Created)
	r.arriving[set].Store(!r.local(set))
	r.idsMu.Lock()
	r.ids[set].After(h.LastShake) // ids not durable were never told: they may be issued again
	r.idsMu.Unlock()
	for _, c := range slices.Concat(r.running, r.finished) {
		c.mu.Lock()
		c.parts[set] = nil
		c.mu.Unlock()
	}
	for _, id := range slices.Sorted(maps.Keys(h.Shares)) {
		sh := h.Shares[id]
		r.nextID = max(r.nextID, int(id)) // its id is taken, whatever the runner remembers
		c := r.byID[int(id)]
		if c == nil && sh.Ended {
			continue // long finished here: nothing to deal, nothing to list
		}
		if c == nil { // its start not heard yet, or forgotten here: the SET still deals it
			c = &Campaign{ID: int(id), Params: paramsOf(sh), Started: now, partial: true, parts: make([]*part, len(r.dealtTo)), local: r.local}
			r.byID[c.ID] = c
			r.running = append(r.running, c)
		}
		d := h.Shake[id]
		if sh.Send {
			d = h.Send[id]
		}
		p := newPart(set, c.ID, sh, d.N, d.Amount, now)
		p.told = true
		if sh.Ended {
			p.ended, p.n, p.amount = true, sh.N, sh.Amount
		}
		c.mu.Lock()
		c.parts[set] = p
		if !c.recorded {
			c.hasFinal = false // the SETs here changed: their shares say what they dealt
		}
		switch {
		case p.ended:
		case c.State() == Finished:
			c.resume()
			r.unretire(c)
		case c.State() == Cancelled:
			r.toEnd = append(r.toEnd, c) // the dealing goroutine ends the SET's share
		}
		c.mu.Unlock()
	}
	for _, c := range r.running {
		c.mu.Lock()
		if c.parts[set] == nil {
			d := h.Shake[uint32(c.ID)]
			if c.Params.Kind == Send {
				d = h.Send[uint32(c.ID)]
			}
			r.addPart(c, set, h.Forgotten, d.N, d.Amount, now)
		}
		c.mu.Unlock()
	}
	if len(r.running) > 0 || len(r.toEnd) > 0 {
		r.startLoop()
	}
}

// unretire moves c from the finished list back to the running one; the
// caller holds r.mu.
func (r *Runner) unretire(c *Campaign) {
	if i := slices.Index(r.finished, c); i >= 0 {
		r.finished = slices.Delete(r.finished, i, i+1)
		r.running = append(r.running, c)
	}
}

// List returns the status of every running campaign and of the latest
// finished or cancelled ones, by id.
func (r *Runner) List() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.running)+len(r.finished))
	for _, c := range r.finished {
		out = append(out, c.status(r.local))
	}
	for _, c := range r.running {
		out = append(out, c.status(r.local))
	}
	slices.SortFunc(out, func(a, b Status) int { return a.ID - b.ID })
	return out
}

// Status is campaign id's status, if the runner knows it.
func (r *Runner) Status(id int) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.byID[id]
	if c == nil {
		return Status{}, false
	}
	return c.status(r.local), true
}

// Has reports whether the runner knows campaign id, whole (not only by a
// SET's share of it).
func (r *Runner) Has(id int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.byID[id]
	return c != nil && !c.partial
}

// Room says whether a campaign may start: nil, or a TooManyError.
func (r *Runner) Room() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cfg.MaxRunning > 0 && len(r.running) >= r.cfg.MaxRunning {
		return &TooManyError{Max: r.cfg.MaxRunning}
	}
	return nil
}

// Running is the number of campaigns running.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// Cancel stops campaign id: once it returns nothing more is dealt here, and
// the shares of the SETs run here are ended; what was dealt stays in the
// SETs. It returns the campaign's status, and ErrNotFound for an id never
// started or long forgotten, ErrFinished (with the status) for a campaign
// that dealt everything. Cancelling a cancelled campaign returns its
// status again.
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
		return c.status(r.local), ErrFinished
	case Running:
		now := r.now()
		if err := r.jn.record(RecCancelled, endRecord(c.ID, now), true, func() {
			for p := range c.held() {
				r.endPart(c, p)
			}
			c.end(Cancelled, now, r.local)
		}); err != nil {
			c.mu.Unlock()
			return c.status(r.local), err
		}
		c.mu.Unlock()
		r.retire(c)
	default:
		c.mu.Unlock()
	}
	return c.status(r.local), nil
}

// endPart ends p's share in its SET, if the SET runs here: a KShare with
// what it dealt. The caller holds c.mu.
func (r *Runner) endPart(c *Campaign, p *part) {
	if p.ended || !r.local(p.set) {
		return
	}
	if !p.told { // nothing dealt: the SET never needs to hear of it
		p.ended = true
		return
	}
	if r.publish(p.set, func(ev *event.Event) {
		ev.Kind, ev.Status, ev.Peer = event.KShare, stages.ShareEnd, uint32(c.ID)
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = stages.AppendShareEnd(ev.Buf.B[:0], uint32(c.ID), p.n, p.amount)
	}) {
		p.ended = true
	}
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
			toEnd := r.toEnd
			r.toEnd = nil
			r.mu.Unlock()
			for _, c := range toEnd {
				c.mu.Lock()
				for p := range c.held() {
					r.endPart(c, p)
				}
				c.mu.Unlock()
			}
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
		var in uint64
		for _, set := range r.bus.Local() {
			dealt := r.dealtTo[set].Load()
			in += dealt - min(r.cfg.Taken(set), dealt)
		}
		pool = room(r.cfg.MaxPool, in)
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
				r.jn.record(RecFinished, endRecord(c.ID, now), false, func() { c.end(Finished, now, r.local) })
			}
			c.mu.Unlock()
			r.retire(c)
		}
	}
}

// step deals c's shares of this tick from *budget and reports whether every
// share of the SETs run here has ended (none runs here: not). A share deals what fell due since
// the last tick and at most a tick's worth of what it was due earlier but
// could not deal within the budget (perTick: ⌈rate × tick⌉, at least one
// envelope), so a share that waited catches up at about twice its rate (at
// least one envelope a tick at low rates), never in one burst. Without a
// wait this is exactly the pacer's Due.
func (r *Runner) step(c *Campaign, now time.Time, budget *uint64, why uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.State() != Running {
		return false
	}
	done, short := true, false
	for p := range c.held() {
		set := p.set
		if !r.local(set) {
			done = done && (p.ended || !r.arriving[set].Load())
			continue
		}
		r.arriving[set].Store(false)
		if p.ended {
			continue
		}
		if !p.told && !r.tell(c, p) {
			done = false
			continue
		}
		due := p.base + p.pacer.Due(now.UnixNano())
		fresh, behind := due-p.lastDue, p.lastDue-p.n
		p.lastDue = due
		want := fresh + min(behind, p.perTick)
		give := min(want, *budget)
		short = short || give < want
		if give > 0 {
			*budget -= give
			r.deal(c, p, give)
		}
		if p.n == p.share.Total {
			r.endPart(c, p)
		}
		done = done && p.ended
	}
	if short {
		c.waiting.Store(why)
	} else {
		c.waiting.Store(notWaiting)
	}
	return done && len(r.bus.Local()) > 0 // a gateway that runs no SET yet has all to deal
}

// tell publishes p's share to its SET, before anything dealt of it.
func (r *Runner) tell(c *Campaign, p *part) bool {
	p.told = r.publish(p.set, func(ev *event.Event) {
		ev.Kind, ev.Status, ev.Peer = event.KShare, stages.ShareStart, uint32(c.ID)
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = stages.AppendShare(ev.Buf.B[:0], uint32(c.ID), p.share)
	})
	return p.told
}

// deal deals n envelopes of p's share into its SET.
func (r *Runner) deal(c *Campaign, p *part, n uint64) {
	sh := p.share
	n = min(n, sh.Total-p.n)
	span := uint64(sh.Max-sh.Min) + 1
	draw := func() uint32 { return sh.Min + uint32(p.rnd.Uint64n(span)) }
	if !sh.Send { // one event carries a batch
		for n > 0 {
			count := min(n, MaxBatch)
			var sum uint64
			if !r.publish(p.set, func(ev *event.Event) {
				ev.Kind, ev.N, ev.Peer = event.KDeal, uint16(count), uint32(c.ID)
				r.idsMu.Lock()
				ev.Env = r.ids[p.set].Reserve(count)
				r.idsMu.Unlock()
				ev.Buf = bytebufferpool.Get()
				for range count {
					a := draw()
					ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, a)
					sum += uint64(a)
				}
			}) {
				return
			}
			r.dealtTo[p.set].Add(count)
			p.n += count
			p.amount += sum
			n -= count
		}
		return
	}
	for range n { // one event per envelope: the SET picks each one's recipients among its online users
		total := draw()
		if !r.publish(p.set, func(ev *event.Event) {
			ev.Kind, ev.N, ev.Total, ev.Peer = event.KSystemSend, sh.Recipients, total, uint32(c.ID)
		}) {
			return
		}
		p.n++
		p.amount += uint64(total)
	}
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
