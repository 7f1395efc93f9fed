package replicated

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/placement"
	"github.com/hongbao-io/hongbao/set"
)

const (
	// jsPrefix names the replicated SETs' stream and buckets in JetStream.
	jsPrefix = jsjournal.DefaultPrefix
)

// SETs is a gateway's part in the replicated SETs.
type SETs struct {
	cfg    Config
	host   Host
	nc     *nats.Conn // the journal's and the records' connection
	store  *jsjournal.Store
	owners *jsjournal.Claims

	// Liveness (liveness.go): every gateway's heartbeat as heard on the
	// journal's connection, and the fence this gateway puts on its SETs
	// while it cannot show that NATS carries for it.
	jsHeard   []atomic.Int64
	beatSub   *nats.Subscription
	ignored   atomic.Int32 // a node whose heartbeats are dropped, in tests; -1 none
	fenced    atomic.Bool
	fences    atomic.Uint64
	stalls    atomic.Uint64
	watchDone chan struct{}

	routed atomic.Bool // the bus exists: ownership changes reroute it

	// The SETs' placement on this gateway (package placement), stepped
	// under pmu by the claims' ticks, the claims heard, the journal, the
	// moves and the standbys; what it answers is carried out outside pmu.
	pmu sync.Mutex
	pm  *placement.Machine

	lostOnce sync.Once
	lost     chan struct{} // closed once this gateway lost a SET it ran
	lostWhy  atomic.Pointer[string]

	stop, done chan struct{}
	stopOnce   sync.Once
	// snapNow asks the snapshot loop for a snapshot now: a takeover replayed
	// a long tail, which the SET's next owner must not replay again.
	snapNow  chan struct{}
	replayed atomic.Int64 // messages replayed by the takes of a round
	claiming atomic.Bool  // claims runs: StopClaims waits for done

	takeovers    atomic.Uint64 // SETs claimed and serving here
	takeoverNs   atomic.Int64  // the last one's claim to serving
	claimsLost   atomic.Uint64 // claims another gateway won
	deferred     atomic.Uint64 // claims not made: the unheard owner still appends
	takeFailures atomic.Uint64 // claims that did not get to serving
	released     atomic.Uint64 // SETs handed back at a graceful stop

	// The follows of SETs under mu: standbys (standby.go) and moves in
	// (move.go) once caught up. Their state is the machine's; these are
	// the Followers it cannot hold.
	mu           sync.Mutex
	standby      map[int]*standby
	incoming     map[int]*jsjournal.Follower
	moves        atomic.Uint64 // SETs handed to another gateway
	moveFailures atomic.Uint64
	movePauseNs  atomic.Int64  // the last move's pause
	standbyTakes atomic.Uint64 // takeovers that started from a standby
	standbyDrops atomic.Uint64 // standbys that failed: to start, to follow, or to take their SET over
}

// Config is a gateway's part in the replicated SETs.
type Config struct {
	Log         *slog.Logger
	NATS        string       // -nats
	Auth        cluster.Auth // its NATS user
	Node, Nodes int          // -node I/N
	Name        string       // -name, or gwI
	Sets        int          // -sets
	Replicas    int          // -replicas of the stream and the buckets
	Lease       time.Duration
	AckWait     time.Duration // -jetstream-ack-wait
	Standby     bool          // -standby
	Rebalance   time.Duration // -rebalance; negative, never
}

// Host is the server the replicated SETs run in: its SETs, built for every
// SET of the cluster, its bus, its journal and its cluster node, the last
// two once they exist (the journal opens after Open, the node joins after
// it).
type Host interface {
	SET(i int) *set.SET // SET i as built now
	Renew(i int) error  // SET i, which does not run here, made blank for a load
	Bus() *event.Bus
	Journal() *journal.Journal
	Node() *cluster.Node
	AdminKey() []byte // the admin token's key, which signs the moves' ops; nil without one
	// Serving: SET i, loaded, is about to run here (its state may be read).
	Serving(i int)
}

// Open connects to JetStream, checks and opens what the operator
// provisioned there (the journal's stream, the snapshot buckets) and reads
// every SET's claims, before the gateway joins the cluster.
func Open(cfg Config, host Host) (*SETs, error) {
	i, n, name := cfg.Node, cfg.Nodes, cfg.Name
	nc, err := cluster.ConnectJetStream(cfg.NATS, jsPrefix, i, cfg.Auth, cfg.Lease)
	if err != nil {
		return nil, err
	}
	r := &SETs{cfg: cfg, host: host, nc: nc, watchDone: make(chan struct{}),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), snapNow: make(chan struct{}, 1),
		standby: map[int]*standby{}, incoming: map[int]*jsjournal.Follower{},
		pm: placement.New(placement.Config{Node: i, Sets: cfg.Sets, Lease: cfg.Lease, Standby: cfg.Standby, Rebalance: cfg.Rebalance}, time.Now())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	layout := jsjournal.Layout{Prefix: jsPrefix, Sets: cfg.Sets, Gateways: n, Replicas: cfg.Replicas}
	// A round's acknowledgement is waited for past its bound, as long as it
	// takes: its fate is read once JetStream answers again, and a claim of
	// another gateway's meanwhile fences it then. Giving up would stop the
	// gateway, and drop its connections, for an outage no other gateway could
	// serve through either (liveness.go).
	if r.store, err = jsjournal.Open(ctx, jsjournal.Options{Conn: nc, Layout: layout, Node: i, Gateway: name, AckWait: cfg.AckWait,
		Hold: func() bool { return true }}); err != nil {
		nc.Close()
		return nil, err
	}
	if r.owners, err = r.store.Claims(ctx, cfg.Log, r.changed); err != nil {
		nc.Close()
		return nil, err
	}
	if err := r.hearOnJournal(); err != nil {
		r.owners.Close()
		nc.Close()
		return nil, err
	}
	for set := range cfg.Sets {
		if c := r.owners.Get(set); c.Name == name && c.Node != i && c.Node >= 0 {
			r.owners.Close()
			nc.Close()
			return nil, fmt.Errorf("-name %s: gateway %d of the cluster has that name: each gateway needs its own", name, c.Node)
		}
	}
	return r, nil
}

// JournalOptions are the journal's options on JetStream.
func (r *SETs) JournalOptions(o journal.Options) journal.Options {
	o.Sink = r.store
	o.OnFenced = func(group int, err error) {
		r.step(placement.Refused{Set: group, Why: fmt.Sprintf("another gateway appended to its journal: it took the SET over (%v)", err)})
	}
	o.OnGroupFailed = func(group int, err error) {
		r.step(placement.Refused{Set: group, Why: fmt.Sprintf("a journal round was not acknowledged (%v): what it held may or may not be in JetStream", err)})
	}
	return o
}

// route points the bus at set's owner of the moment: its link, or Nowhere
// while it has none here or elsewhere.
func (r *SETs) route(set, owner int) {
	bus := r.host.Bus()
	switch {
	case owner >= 0 && owner != r.cfg.Node:
		if t := r.host.Node().Link(owner); t != nil {
			bus.Route(set, t, true)
			return
		}
		fallthrough
	default:
		bus.Route(set, event.NewNowhere(bus.Ring(set).Size()), true)
	}
}

// RouteAll routes every SET to its owner, once the bus is built; from then
// on the claims heard reroute.
func (r *SETs) RouteAll() {
	for set := range r.cfg.Sets {
		r.route(set, r.owners.Of(set))
	}
	r.routed.Store(true)
	for set := range r.cfg.Sets { // what changed while routing
		if !r.state(set).Tells() {
			r.route(set, r.owners.Of(set))
		}
	}
}

// step steps the placement with ev and carries out what it answers; the
// error is the machine's refusal.
func (r *SETs) step(ev placement.Event) error {
	rd, err := r.stepReady(ev)
	r.carryOut(rd)
	return err
}

// stepReady steps the placement with ev and returns what it answers, for
// the caller to carry out.
func (r *SETs) stepReady(ev placement.Event) (placement.Ready, error) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	err := r.pm.Step(ev)
	return r.pm.Ready(), err
}

// state is set's placement here.
func (r *SETs) state(set int) placement.SET {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.pm.SET(set)
}

// Telling is the SETs whose money this gateway tells, each with its state.
func (r *SETs) Telling() map[int]placement.SET {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	out := map[int]placement.SET{}
	for _, set := range r.pm.Telling() {
		out[set] = r.pm.SET(set)
	}
	return out
}

// carryOut does what the placement asked, but its takes and renewals,
// which the claims and the loads carry out where they asked for them.
func (r *SETs) carryOut(rd placement.Ready) {
	if rd.Lost != nil {
		r.lose(rd.Lost)
		return
	}
	for _, d := range rd.Drop {
		r.dropFollow(d)
	}
	for _, set := range rd.Follow {
		r.startStandby(set)
	}
	for _, mv := range rd.Move {
		r.rebalance(mv)
	}
	for _, rt := range rd.Route {
		if r.routed.Load() {
			r.route(rt.Set, rt.Node)
		}
	}
}

// changed follows a SET's claims (on the watch's goroutine).
func (r *SETs) changed(set int, was, now jsjournal.Claim) {
	rd, _ := r.stepReady(placement.ClaimHeard{Set: set, Now: ownerOf(now)})
	r.carryOut(rd)
	if len(rd.Route) > 0 {
		r.cfg.Log.Info("SET owner", "set", set, "owner", now.Name, "node", now.Node, "epoch", now.Epoch, "was", was.Name)
	}
}

// ownerOf is a claim as the placement knows it.
func ownerOf(c jsjournal.Claim) placement.Owner {
	return placement.Owner{Node: c.Node, Name: c.Name, Epoch: c.Epoch}
}

// lose stops this gateway for good once it lost a SET it holds.
func (r *SETs) lose(l *placement.Loss) {
	r.lostOnce.Do(func() {
		msg := l.String()
		r.lostWhy.Store(&msg)
		r.cfg.Log.Error("lost a SET: this gateway stops telling money and exits; its clients are sent elsewhere (ERROR 9)", "set", l.Set, "why", l.Why)
		close(r.lost)
	})
}

// LostReason is why the gateway lost a SET, "" if it did not.
func (r *SETs) LostReason() string {
	if r == nil {
		return ""
	}
	if p := r.lostWhy.Load(); p != nil {
		return *p
	}
	return ""
}

// Release hands the SETs run here back at a graceful stop, once their
// last rounds are durable in j (closed), so that the others claim them at
// once instead of after the lease: each a release after its last message.
func (r *SETs) Release(j *journal.Journal) {
	if r.LostReason() != "" || r.fenced.Load() {
		return // cut off: the others claim its SETs once its lease lapses
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for set, st := range r.Telling() {
		if r.step(placement.Release{Set: set}) != nil {
			continue
		} // its claims change next: no loss
		last, open := j.LastSeq(set)
		if !open {
			continue // fenced or failed: not this gateway's to hand back
		}
		if err := r.owners.Release(ctx, set, st.Epoch, last); err != nil {
			r.cfg.Log.Warn("handing a SET back at shutdown failed: the others take it once the lease lapses", "set", set, "err", err)
			continue
		}
		r.released.Add(1)
	}
}

// StopClaims stops the claims and waits for the one under way, if any: a
// gateway that is stopping claims nothing more.
func (r *SETs) StopClaims() {
	r.stopOnce.Do(func() { close(r.stop) })
	if r.claiming.Load() {
		<-r.done
		<-r.watchDone
	}
}

// Close stops the claims and the standbys and closes the connection.
func (r *SETs) Close() {
	if r == nil {
		return
	}
	r.StopClaims()
	r.stopStandbys()
	if r.beatSub != nil {
		r.beatSub.Unsubscribe()
	}
	r.owners.Close()
	r.nc.FlushTimeout(time.Second)
	r.nc.Close()
}

// Running is how many SETs run here.
func (r *SETs) Running() int {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return len(r.pm.Telling())
}
