package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"hongbao/cluster"
	"hongbao/event"
	"hongbao/journal"
	"hongbao/jsjournal"
	"hongbao/placement"
	"hongbao/proto"
	"hongbao/set"
	"hongbao/stages"
)

// Replicated SETs (-journal jetstream): every SET's journal is its
// subjects of one JetStream stream (package jsjournal), a subject per
// gateway, and its owner the last claim in it (jsjournal.Claims). Every
// gateway builds every SET and runs those it claimed. A gateway not heard
// from for -lease loses its SETs: each survivor claims its even share of
// them (epoch + 1), appending its claim after the SET's last message —
// after which the old owner's next append is refused — loads the SET's
// snapshot and replays its records up to the claim, and serves it.
//
// A gateway that loses a SET it runs (its append refused, its record taken
// over, a round that failed) stops: ERROR 9 to its clients, exit status 3
// (ExitLost). Its SETs' in-memory state may hold changes whose records
// never became durable, so it never serves them again; a new process
// starts from what JetStream holds (docs/DESIGN.md, The lease).

// ExitLost is the exit status of a gateway that lost a SET: its supervisor
// starts it again, and it takes its share of the SETs that need an owner.
const ExitLost = 3

const (
	// jsPrefix names the replicated SETs' stream and buckets in JetStream.
	jsPrefix = jsjournal.DefaultPrefix
)

// replicated is a gateway's part in the replicated SETs.
type replicated struct {
	s      *Server
	nc     *nats.Conn // the journal's and the records' connection
	store  *jsjournal.Store
	owners *jsjournal.Claims
	node   int
	nodes  int // -node I/N: N
	name   string

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
	claiming atomic.Bool  // claims runs: stopClaims waits for done

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

// openReplicated connects to JetStream, checks and opens what the operator
// provisioned there (the journal's stream, the snapshot buckets) and reads
// every SET's claims, before the gateway joins the cluster.
func (s *Server) openReplicated(password string) error {
	i, n, _ := s.opts.nodeOf()
	name := s.opts.Name
	if name == "" {
		name = fmt.Sprintf("gw%d", i)
	}
	nc, err := cluster.ConnectJetStream(s.opts.NATS, jsPrefix, i, s.opts.natsAuth(password), s.opts.Lease)
	if err != nil {
		return err
	}
	r := &replicated{s: s, nc: nc, node: i, nodes: n, name: name, watchDone: make(chan struct{}),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), snapNow: make(chan struct{}, 1),
		standby: map[int]*standby{}, incoming: map[int]*jsjournal.Follower{},
		pm: placement.New(placement.Config{Node: i, Sets: s.opts.Sets, Lease: s.opts.Lease, Standby: !s.opts.NoStandby, Rebalance: s.opts.Rebalance}, time.Now())}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	layout := jsjournal.Layout{Prefix: jsPrefix, Sets: s.opts.Sets, Gateways: n, Replicas: s.opts.Replicas}
	// A round's acknowledgement is waited for past its bound, as long as it
	// takes: its fate is read once JetStream answers again, and a claim of
	// another gateway's meanwhile fences it then. Giving up would stop the
	// gateway, and drop its connections, for an outage no other gateway could
	// serve through either (liveness.go).
	if r.store, err = jsjournal.Open(ctx, jsjournal.Options{Conn: nc, Layout: layout, Node: i, Gateway: name, AckWait: s.opts.JetStreamAckWait,
		Hold: func() bool { return true }}); err != nil {
		nc.Close()
		return err
	}
	if r.owners, err = r.store.Claims(ctx, s.log, r.changed); err != nil {
		nc.Close()
		return err
	}
	if err := r.hearOnJournal(); err != nil {
		r.owners.Close()
		nc.Close()
		return err
	}
	for set := range s.opts.Sets {
		if c := r.owners.Get(set); c.Name == name && c.Node != i && c.Node >= 0 {
			r.owners.Close()
			nc.Close()
			return fmt.Errorf("-name %s: gateway %d of the cluster has that name: each gateway needs its own", name, c.Node)
		}
	}
	s.repl = r
	return nil
}

// joinReplicated opens the replicated SETs' records, joins the cluster and
// opens the journal on JetStream: openJournal and joinCluster of this mode.
func (s *Server) joinReplicated() error {
	pass, err := s.opts.natsPassword()
	if err != nil {
		return err
	}
	if err := s.openReplicated(pass); err != nil {
		return err
	}
	if err := s.joinCluster(); err != nil {
		s.repl.close()
		s.repl = nil
		return err
	}
	j, err := journal.Open(s.journalHooks(s.repl.journalOptions(journal.Options{Sets: s.opts.Sets, RoundEvery: s.opts.JournalRound})))
	if err != nil {
		s.closeCluster()
		s.repl.close()
		s.repl = nil
		return err
	}
	s.journal = j
	return nil
}

// journalOptions are the journal's options on JetStream.
func (r *replicated) journalOptions(o journal.Options) journal.Options {
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
func (r *replicated) route(set, owner int) {
	bus := r.s.bus
	switch {
	case owner >= 0 && owner != r.node:
		if t := r.s.node.Link(owner); t != nil {
			bus.Route(set, t, true)
			return
		}
		fallthrough
	default:
		bus.Route(set, event.NewNowhere(bus.Ring(set).Size()), true)
	}
}

// routeAll routes every SET to its owner, once the bus is built; from then
// on the claims heard reroute.
func (r *replicated) routeAll() {
	for set := range r.s.opts.Sets {
		r.route(set, r.owners.Of(set))
	}
	r.routed.Store(true)
	for set := range r.s.opts.Sets { // what changed while routing
		if !r.state(set).Tells() {
			r.route(set, r.owners.Of(set))
		}
	}
}

// step steps the placement with ev and carries out what it answers; the
// error is the machine's refusal.
func (r *replicated) step(ev placement.Event) error {
	rd, err := r.stepReady(ev)
	r.carryOut(rd)
	return err
}

// stepReady steps the placement with ev and returns what it answers, for
// the caller to carry out.
func (r *replicated) stepReady(ev placement.Event) (placement.Ready, error) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	err := r.pm.Step(ev)
	return r.pm.Ready(), err
}

// state is set's placement here.
func (r *replicated) state(set int) placement.SET {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.pm.SET(set)
}

// telling is the SETs whose money this gateway tells, each with its state.
func (r *replicated) telling() map[int]placement.SET {
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
func (r *replicated) carryOut(rd placement.Ready) {
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
func (r *replicated) changed(set int, was, now jsjournal.Claim) {
	rd, _ := r.stepReady(placement.ClaimHeard{Set: set, Now: ownerOf(now)})
	r.carryOut(rd)
	if len(rd.Route) > 0 {
		r.s.log.Info("SET owner", "set", set, "owner", now.Name, "node", now.Node, "epoch", now.Epoch, "was", was.Name)
	}
}

// ownerOf is a claim as the placement knows it.
func ownerOf(c jsjournal.Claim) placement.Owner {
	return placement.Owner{Node: c.Node, Name: c.Name, Epoch: c.Epoch}
}

// lose stops this gateway for good once it lost a SET it holds.
func (r *replicated) lose(l *placement.Loss) {
	r.lostOnce.Do(func() {
		msg := l.String()
		r.lostWhy.Store(&msg)
		r.s.log.Error("lost a SET: this gateway stops telling money and exits; its clients are sent elsewhere (ERROR 9)", "set", l.Set, "why", l.Why)
		close(r.lost)
	})
}

// Lost is closed once the gateway lost a SET it ran (-journal jetstream):
// it must stop (Shutdown), and exit with ExitLost.
func (s *Server) Lost() <-chan struct{} {
	if s.repl == nil {
		return nil
	}
	return s.repl.lost
}

// LostError is Shutdown's error once the gateway lost a SET it ran: it
// exits with ExitLost.
type LostError struct{ Why string }

func (e *LostError) Error() string {
	return "this gateway lost a SET it ran to another gateway: " + e.Why
}

// lostReason is why the gateway lost a SET, "" if it did not.
func (r *replicated) lostReason() string {
	if r == nil {
		return ""
	}
	if p := r.lostWhy.Load(); p != nil {
		return *p
	}
	return ""
}

// startReplicated starts the journal's writer and the claims: the
// replicated mode's recover, before anything is served. No SET runs yet.
func (s *Server) startReplicated() error {
	for _, st := range s.allSets() {
		st.Snapshots(func(p stages.Part) { s.snapParts <- p })
	}
	if err := s.journal.Start(); err != nil {
		return err
	}
	s.repl.routeAll()
	return nil
}

// claims runs until stop: every heartbeat, it ticks the placement with
// what this gateway hears and carries out its answer — claims of the SETs
// whose owner is gone, and of those an earlier process of its node's held,
// standbys, a rebalancing move.
func (r *replicated) claims() {
	defer close(r.done)
	t := time.NewTicker(placement.Beat)
	defer t.Stop()
	r.step(placement.Start{Now: time.Now()})
	for {
		select {
		case <-r.stop:
			return
		case <-r.lost:
			return
		case <-t.C:
		}
		// The clock, not the tick's time: the tick that waited in the
		// channel through a pause carries the time it paused.
		tick := placement.Tick{Now: time.Now(), Live: r.live(), Heard: r.s.node.Heard(), Takers: r.s.node.Takers(),
			Owner: make([]placement.Owner, r.s.opts.Sets), Stopped: r.stoppedStandbys()}
		// A gateway claims only while it can show that NATS carries for it
		// (liveness.go): one that hears nobody must not conclude that
		// everybody else is dead.
		tick.Current = !r.fenced.Load() && r.notCurrent(r.currentWithin()) == ""
		for set := range tick.Owner {
			tick.Owner[set] = ownerOf(r.owners.Get(set))
		}
		rd, _ := r.stepReady(tick)
		if rd.Lost != nil {
			r.lose(rd.Lost)
			return
		}
		if !r.takeAll(rd.Take) {
			return // a claim may name this gateway, which cannot serve it: stop
		}
		r.carryOut(rd)
	}
}

// maxTakes bounds the SETs taken at once.
const maxTakes = 8

// snapshotAfterReplay: takes that replayed more messages than this are
// followed by a snapshot at once, so that a SET that moves often is not
// replayed from ever further back.
const snapshotAfterReplay = 1000

// takeAll takes sets, several at once: a take waits mostly on JetStream's
// round trips, so one SET's need not delay the next. It is false once a
// take failed (the gateway stops) or the claims stop.
func (r *replicated) takeAll(sets []int) bool {
	var wg sync.WaitGroup
	var failed atomic.Bool
	slots := make(chan struct{}, maxTakes)
	defer wg.Wait()
	for _, set := range sets {
		select {
		case <-r.stop:
			return false
		case slots <- struct{}{}:
		}
		if failed.Load() {
			return false
		}
		// A claim before it can take seconds: the SET may have found a
		// live owner since the list was made.
		if o := r.owners.Of(set); o >= 0 && o != r.node && slices.Contains(r.live(), o) {
			<-slots
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := r.take(set); err != nil {
				r.takeFailures.Add(1)
				r.s.log.Error("claiming a SET failed; the others take it once this gateway's claim lapses", "set", set, "err", err)
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if r.replayed.Swap(0) > snapshotAfterReplay {
		select {
		case r.snapNow <- struct{}{}:
		default:
		}
	}
	return !failed.Load()
}

// take claims set, fencing its old owner, loads it and serves it. An error
// after the claim stops the gateway (lose): the claim names this gateway.
func (r *replicated) take(set int) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	was := r.owners.Get(set)
	if was.Node >= 0 && was.Node != r.node {
		// Unheard is not dead: under load a gateway's heartbeats can come
		// late while it serves. One that appended to the SET within the
		// lease (by the NATS server's clock, against this one's) is alive.
		if last, err := r.store.Last(ctx, set); err == nil && last.Valid && last.Fenced && !last.Claim && last.Node == was.Node &&
			time.Since(last.Time) < r.s.opts.Lease {
			r.deferred.Add(1)
			return nil
		}
	}
	// The claim is appended after the SET's last message, which fences the
	// old owner: its next append is refused. It supersedes was only: a SET
	// another survivor claimed meanwhile is not taken from it.
	c, err := r.owners.Claim(ctx, set, was.Epoch, 0)
	if errors.Is(err, jsjournal.ErrClaimLost) {
		r.claimsLost.Add(1)
		return nil
	}
	if err != nil {
		r.s.log.Warn("claiming a SET: JetStream refused; retried at the next heartbeat", "set", set, "err", err)
		return nil // nothing changed: the SET is not this gateway's
	}
	r.owned(set, c)
	claimed := time.Now()
	fail := func(err error) error {
		r.step(placement.Failed{Set: set, Why: err.Error()}) // its claim names this gateway: it stops
		return err
	}
	seq := c.Seq
	rep, standing := r.fromStandby(ctx, set, seq)
	if !standing {
		if err := r.blank(set); err != nil {
			return fail(err)
		}
		load, apply := restorer(r.s.setAt(set))
		if rep, err = r.store.Load(ctx, set, load, apply); err != nil {
			return fail(fmt.Errorf("loading SET %d: %w", set, err))
		}
		r.replayed.Add(int64(rep.Messages))
	}
	if rep.LastSeq != seq {
		return fail(fmt.Errorf("SET %d: appended to after this gateway's claim (message %d, the claim %d)", set, rep.LastSeq, seq))
	}
	loaded := time.Now()
	if err := r.serve(set, seq); err != nil {
		return fail(err)
	}
	took := time.Since(start)
	r.takeovers.Add(1)
	r.takeoverNs.Store(int64(took))
	r.s.log.Info("serving SET", "set", set, "epoch", c.Epoch, "was", was.Name, "standby", standing, "snapshot_seq", rep.Snapshot,
		"messages_replayed", rep.Messages, "records_replayed", rep.Records, "dropped", rep.Dropped, "claim_seq", seq, "took", took.Round(time.Microsecond),
		"claiming", claimed.Sub(start).Round(time.Microsecond), "loading", loaded.Sub(claimed).Round(time.Microsecond))
	return nil
}

// owned notes that this gateway's claim c of set went through: its epoch,
// which its appends are fenced against, and its sequence, which its
// snapshots name. A move in of it, if any and not switching, is dropped.
func (r *replicated) owned(set int, c jsjournal.Claim) {
	r.step(placement.Claimed{Set: set, Epoch: c.Epoch, Seq: c.Seq, Name: r.name})
	r.store.Own(set, c.Epoch)
}

// snapshotSETs puts a snapshot of every SET run here to JetStream, purging
// what it makes useless: the SETs mark their journal on their goroutines
// (KSnapshot) and hand in their state, kept once both marks are durable.
func (s *Server) snapshotSETs() error {
	r := s.repl
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	for len(s.snapParts) > 0 {
		<-s.snapParts
	}
	id := uint64(time.Now().UnixNano()) // never reused: a new process's too
	ended := endedCampaigns(s.camps.List())
	var sets []int
	retired := map[int]uint8{}
	telling := r.telling()
	for set := range s.opts.Sets {
		if _, ok := telling[set]; !ok || s.journal.GroupErr(set) != nil {
			continue
		}
		// Its rounds go to a new generation from here: every message of
		// the one retired comes before the marks, so the snapshot after
		// next makes it useless whole (Compact below).
		gen, err := s.journal.RotateGroup(set)
		if err != nil {
			continue
		}
		retired[set] = gen
		rg := s.bus.Ring(set)
		seq, err := rg.Claim(1)
		if err != nil {
			continue
		}
		*rg.At(seq) = event.Event{Kind: event.KSnapshot, Env: id, Buf: ended}
		rg.Publish(seq, seq)
		sets = append(sets, set)
	}
	start := time.Now()
	parts := map[int][]stages.Part{}
	timeout := time.After(time.Minute)
	for got := 0; got < 2*len(sets); {
		select {
		case p := <-s.snapParts:
			if p.ID == id {
				set := s.setOf(p.PID)
				parts[set] = append(parts[set], p)
				got++
			}
		case <-timeout:
			return errors.New("snapshot: the SETs did not hand in their state within a minute")
		}
	}
	var errs []error
	bytes := 0
	for _, set := range sets {
		snap := jsjournal.Snapshot{ID: id, Owner: r.node, Epoch: telling[set].Epoch, ClaimSeq: telling[set].ClaimSeq}
		for _, p := range parts[set] {
			if err := s.journal.Wait(p.PID, p.Pos); err != nil {
				errs = append(errs, err)
				snap.Seq = 0
				break
			}
			at, ok := s.journal.MarkSeq(p.PID, id)
			if !ok {
				errs = append(errs, fmt.Errorf("snapshot: SET %d: producer %d's mark is not durable", set, p.PID))
				snap.Seq = 0
				break
			}
			if snap.Seq == 0 || at < snap.Seq {
				snap.Seq = at
			}
			snap.Parts = append(snap.Parts, jsjournal.Part{PID: p.PID, Data: p.Data})
			bytes += len(p.Data)
		}
		if snap.Seq == 0 || s.journal.GroupErr(set) != nil {
			continue // lost meanwhile: the new owner's snapshots are its own
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.store.PutSnapshot(ctx, set, snap)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The generation retired at the snapshot before: everything in it
		// precedes that one, which a reader a snapshot behind may still
		// read from; this one's is kept for the next.
		if err := s.journal.Compact(set, retired[set]+journal.Gens-1); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: compacting SET %d: %w", set, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	took := time.Since(start)
	s.snapStats.count.Add(1)
	s.snapStats.bytes.Store(uint64(bytes))
	s.snapStats.ns.Store(int64(took))
	s.log.Info("snapshot", "id", id, "sets", len(sets), "bytes", bytes, "took", took.Round(time.Microsecond))
	return nil
}

// setOf is the SET of journal producer pid.
func (s *Server) setOf(pid uint16) int {
	for _, st := range s.allSets() {
		if p := st.PIDs(); p[0] == int(pid) || p[1] == int(pid) {
			return st.Index()
		}
	}
	return -1
}

// release hands the SETs run here back at a graceful stop, once their
// last rounds are durable in j (closed), so that the others claim them at
// once instead of after the lease: each a release after its last message.
func (r *replicated) release(j *journal.Journal) {
	if r.lostReason() != "" || r.fenced.Load() {
		return // cut off: the others claim its SETs once its lease lapses
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for set, st := range r.telling() {
		if r.step(placement.Release{Set: set}) != nil {
			continue
		} // its claims change next: no loss
		last, open := j.LastSeq(set)
		if !open {
			continue // fenced or failed: not this gateway's to hand back
		}
		if err := r.owners.Release(ctx, set, st.Epoch, last); err != nil {
			r.s.log.Warn("handing a SET back at shutdown failed: the others take it once the lease lapses", "set", set, "err", err)
			continue
		}
		r.released.Add(1)
	}
}

// stopClaims stops the claims and waits for the one under way, if any: a
// gateway that is stopping claims nothing more.
func (r *replicated) stopClaims() {
	r.stopOnce.Do(func() { close(r.stop) })
	if r.claiming.Load() {
		<-r.done
		<-r.watchDone
	}
}

// close stops the claims and closes the connection.
func (r *replicated) close() {
	if r == nil {
		return
	}
	r.stopClaims()
	r.stopStandbys()
	if r.beatSub != nil {
		r.beatSub.Unsubscribe()
	}
	r.owners.Close()
	r.nc.FlushTimeout(time.Second)
	r.nc.Close()
}

// running is how many SETs run here.
func (r *replicated) running() int {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return len(r.pm.Telling())
}

// shutdownCode is the ERROR code the SETs' clients get at a stop: moved
// once this gateway lost a SET, shutting down otherwise.
func (s *Server) shutdownCode() uint8 {
	if s.repl.lostReason() != "" {
		return proto.ErrCodeMoved
	}
	return 0
}

// restorer returns what restores SET st from JetStream: its snapshot's
// parts, then its records, each at the time it is applied (a standby
// applies them as they come); either refuses another SET's.
func restorer(st *set.SET) (func(jsjournal.Snapshot) error, func(journal.Record) error) {
	set := st.Index()
	load := func(snap jsjournal.Snapshot) error {
		now := time.Now().UnixNano()
		for _, p := range snap.Parts {
			if ok, err := st.Load(p.PID, p.Data, now); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("a part of journal producer %d, which is not SET %d's", p.PID, set)
			}
		}
		return nil
	}
	apply := func(rec journal.Record) error {
		if ok, err := st.Apply(rec, time.Now().UnixNano()); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("a record of journal producer %d, which is not SET %d's", rec.PID, set)
		}
		return nil
	}
	return load, apply
}
