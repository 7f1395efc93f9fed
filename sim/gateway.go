package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/hongbao-io/hongbao/placement"
)

// gateway is one gateway process and the model of its driver (package
// replicated): the heartbeats it hears, the claims it reads, the takes,
// the SETs it serves and their rounds, the moves.
type gateway struct {
	w           *world
	node        int
	name        string
	up          bool
	inc         int      // incarnation: what was scheduled for an earlier process is dropped
	pausedUntil duration // SIGSTOP until then
	unwell      duration // the end of its last start, pause or cut
	cut         bool     // cut off from NATS
	deaf        bool     // its core NATS connection silent: no heartbeat in or out; JetStream answers
	fenced      bool     // it fenced itself, cut off for a lease
	skew        duration // its clock's error
	leaving     bool
	m           *placement.Machine
	heard       [2][]duration // per connection (core, journal's), per gateway: its last heartbeat heard, by this gateway's clock
	takers      []bool        // per gateway, whether its last heartbeat said it takes SETs
	view        []placement.Owner
	busy        int // takes under way: the claims wait for them, as replicated's loop does
	sets        []*loaded
}

// loaded is a SET loaded here: its state and its rounds.
type loaded struct {
	epoch   uint64
	last    uint64           // its last message as this gateway knows it: its next append expects it
	answers map[uint64]int64 // the answers kept for request ids
	batch   []*request       // requests for the next round
	round   []*request       // the round in flight
	leaving bool             // a move's cut began: requests are answered "retry"
	cutting func()           // a move's cut waits for the round in flight
}

// clock is g's time.
func (g *gateway) clock() time.Time { return t0.Add(g.w.now + g.skew) }

// local is g's own clock in the world's terms.
func (g *gateway) local() duration { return g.w.now + g.skew }

// later runs f on g after d, if g is still the same process; a paused
// process runs it when it resumes.
func (g *gateway) later(d duration, f func()) {
	inc := g.inc
	var run func()
	run = func() {
		switch {
		case g.inc != inc || !g.up:
		case g.pausedUntil > g.w.now:
			g.w.at(g.pausedUntil-g.w.now, run)
		default:
			f()
		}
	}
	g.w.at(d, run)
}

// receive runs f on g after a network delay, if NATS carries it on the
// core connection: not while either end is cut off or deaf, not if the
// message is lost.
func (g *gateway) receive(from *gateway, f func()) {
	if from.deaf || g.deaf {
		return
	}
	g.receiveOn(from, f)
}

// receiveOn is receive on the journal's connection, which a silent core
// connection leaves be.
func (g *gateway) receiveOn(from *gateway, f func()) {
	w := g.w
	if from.cut || g.cut || w.chance(w.drop) {
		return
	}
	g.later(w.between(time.Millisecond, 30*time.Millisecond), func() {
		if !g.cut {
			f()
		}
	})
}

// start starts the gateway process.
func (g *gateway) start() {
	w := g.w
	g.inc++
	g.up, g.cut, g.deaf, g.fenced, g.leaving, g.busy = true, false, false, false, false, 0
	g.unwell = w.now
	g.m = placement.New(placement.Config{Node: g.node, Sets: w.cfg.Sets, Lease: w.cfg.Lease, Standby: true, Rebalance: time.Second}, g.clock())
	for c := range g.heard {
		g.heard[c] = make([]duration, len(w.gws))
		for i := range g.heard[c] {
			g.heard[c][i] = -time.Hour
		}
	}
	g.takers = make([]bool, len(w.gws))
	g.sets = make([]*loaded, w.cfg.Sets)
	g.view = make([]placement.Owner, w.cfg.Sets)
	for set, c := range w.js.claim {
		g.view[set] = g.owner(c)
	}
	w.log("%s starts", g.name)
	g.step(placement.Start{Now: g.clock()})
	g.later(0, g.beat)
	g.later(placement.Beat, g.tick)
}

// stop ends the process: what it held in memory is gone.
func (g *gateway) stop(why string) {
	if !g.up {
		return
	}
	g.w.log("%s stops: %s", g.name, why)
	g.up = false
	g.inc++
	g.pausedUntil = 0
}

func (g *gateway) owner(c claim) placement.Owner {
	name := ""
	if c.node >= 0 {
		name = fmt.Sprintf("gw%d", c.node)
	}
	return placement.Owner{Node: c.node, Name: name, Epoch: c.epoch}
}

// beat sends g's heartbeat to every gateway, itself included, heard on
// both connections (replicated's liveness.go): the core one and the
// journal's.
func (g *gateway) beat() {
	for _, o := range g.w.gws {
		taker := !g.leaving
		for c, recv := range []func(*gateway, func()){o.receive, o.receiveOn} {
			heard := func() { o.heard[c][g.node], o.takers[g.node] = o.local(), taker }
			twice := g.w.chance(0.02) // sometimes twice
			recv(g, heard)
			if twice {
				recv(g, heard)
			}
		}
	}
	g.later(placement.Beat, g.beat)
}

// within lists the gateways heard within d on the core connection, or on
// either (any).
func (g *gateway) within(d duration, any bool) []int {
	var out []int
	for n := range g.heard[0] {
		if g.local()-g.heard[0][n] < d || any && g.local()-g.heard[1][n] < d {
			out = append(out, n)
		}
	}
	return out
}

// hears reports whether g heard itself within d on both connections (both
// true), or on one.
func (g *gateway) hears(d duration, both bool) bool {
	core, js := g.local()-g.heard[0][g.node] < d, g.local()-g.heard[1][g.node] < d
	if both {
		return core && js
	}
	return core || js
}

// tick is the claims' heartbeat: the placement ticked with what g hears,
// its answer carried out.
func (g *gateway) tick() {
	g.later(placement.Beat, g.tick)
	w := g.w
	// Current: it hears itself on both connections within half the lease;
	// cut off: on neither for a lease.
	hearsSelf := g.hears(w.cfg.Lease/2, true)
	switch {
	case !g.fenced && !g.hears(w.cfg.Lease, false):
		g.fenced = true
		w.log("%s fences itself: it has not heard itself for a lease", g.name)
	case g.fenced && hearsSelf:
		g.unfence()
		if !g.up {
			return
		}
	}
	if g.busy > 0 {
		return
	}
	live := g.within(w.cfg.Lease, w.cfg.Broken != "core")
	var takers []int
	for _, n := range live {
		if g.takers[n] {
			takers = append(takers, n)
		}
	}
	current := !g.fenced && hearsSelf
	if w.cfg.Broken == "core" {
		current = !g.fenced
	}
	tick := placement.Tick{Now: g.clock(), Current: current, Owner: slices.Clone(g.view),
		Live: live, Heard: g.within(time.Second, false), Takers: takers}
	g.step(tick)
	g.ready()
}

// unfence: current again, g checks each SET it tells against its claims:
// taken meanwhile, it stops.
func (g *gateway) unfence() {
	g.fenced = false
	g.w.log("%s hears itself again", g.name)
	for set, c := range g.w.js.claim {
		g.heardClaim(set, c)
		if g.m.Tells(set) && (c.node != g.node || c.epoch != g.m.SET(set).Epoch) {
			g.step(placement.Refused{Set: set, Why: "claimed by another while cut off"})
		}
	}
	g.ready()
}

// catchUp reads the claims g missed while cut off: its watch of them
// resumes where it stopped, as JetStream's ordered consumers do.
func (g *gateway) catchUp() {
	for set, c := range g.w.js.claim {
		g.heardClaim(set, c)
	}
	g.ready()
}

// heardClaim steps g with a SET's last claim, if it changed.
func (g *gateway) heardClaim(set int, c claim) {
	o := g.owner(c)
	if g.view[set] == o || c.epoch < g.view[set].Epoch {
		return
	}
	g.view[set] = o
	g.step(placement.ClaimHeard{Set: set, Now: o})
}

// ready carries out what the machine asks.
func (g *gateway) ready() {
	rd := g.m.Ready()
	if rd.Lost != nil {
		set := rd.Lost.Set
		if c := g.w.js.claim[set]; c.node == g.node && c.epoch == g.m.SET(set).Epoch && g.m.SET(set).Tells() {
			g.w.fail("%s stops for SET %d, whose last claim is still its own (epoch %d): %s", g.name, set, c.epoch, rd.Lost.Why)
		}
		g.stop("lost " + rd.Lost.String())
		g.w.at(g.w.between(500*time.Millisecond, 3*time.Second), g.start)
		return
	}
	for _, set := range rd.Take {
		g.take(set)
	}
	for _, set := range rd.Follow {
		g.later(g.w.between(20*time.Millisecond, 300*time.Millisecond), func() {
			var err error
			if g.w.chance(0.05) {
				err = fmt.Errorf("a snapshot purged what it had not read")
			}
			g.step(placement.StandbyStarted{Set: set, Err: err})
			g.ready()
		})
	}
	for _, mv := range rd.Move {
		g.moveOut(mv.Set, mv.To)
	}
}

// js runs op at the stream after a round trip's half and replies with its
// outcome after the other half; while g is cut off or the stream has no
// leader, op does not run and reply, late, gets false, not acked.
func (g *gateway) js(op func() bool, reply func(ok, acked bool)) {
	w := g.w
	if g.cut {
		g.later(w.between(100*time.Millisecond, time.Second), func() { reply(false, false) })
		return
	}
	w.at(w.between(time.Millisecond, 20*time.Millisecond), func() {
		if w.js.down > w.now { // no leader: the publish times out, unstored
			g.later(w.between(500*time.Millisecond, 2*time.Second), func() { reply(false, false) })
			return
		}
		ok := op()
		g.later(w.between(time.Millisecond, 20*time.Millisecond), func() { reply(ok, true) })
	})
}

// take claims set after the claim g heard last, loads it and serves it.
func (g *gateway) take(set int) {
	g.busy++
	g.claim(set, g.view[set].Epoch, 0, func(c claim, seq uint64, ok bool) {
		if !ok {
			g.busy--
			return
		}
		g.step(placement.Claimed{Set: set, Epoch: c.epoch, Seq: seq, Name: g.name})
		g.step(placement.Blank{Set: set})
		g.load(set, c.epoch, seq, func(err error) {
			g.busy--
			if err != nil {
				g.step(placement.Failed{Set: set, Why: err.Error()})
			}
			g.ready()
		})
	})
}

// claim appends g's claim of set after the claim at epoch was — a take's
// (after 0), or a move's right after message after — and calls then with
// it; ok is false if it did not land, or landed and its ack was lost (in a
// share of seeds), which g cannot tell apart.
func (g *gateway) claim(set int, was, after uint64, then func(c claim, seq uint64, ok bool)) {
	w := g.w
	var c claim
	var seq uint64
	g.js(func() bool {
		var ok bool
		prev := w.js.claim[set].node
		if c, seq, ok = w.js.appendClaim(set, g.node, was, after); ok {
			how := "a take"
			if after == 0 {
				w.checkClaim(set, prev, g)
			} else {
				how = "a move"
			}
			w.log("%s claims SET %d at epoch %d (message %d, %s)", g.name, set, c.epoch, seq, how)
			w.tellClaim(set, c)
		}
		return ok
	}, func(ok, acked bool) {
		if ok && acked && w.chance(w.ackLoss) {
			acked = false
			w.log("%s: the ack of its claim of SET %d is lost", g.name, set)
		}
		then(c, seq, ok && acked)
	})
}

// load reads set up to its message seq, claimed at epoch, and serves it;
// done says how it went.
func (g *gateway) load(set int, epoch, seq uint64, done func(error)) {
	w := g.w
	g.later(w.between(10*time.Millisecond, 300*time.Millisecond), func() {
		if w.js.last(set) != seq {
			done(fmt.Errorf("SET %d: appended to after this gateway's claim (message %d, the claim %d)", set, w.js.last(set), seq))
			return
		}
		ld := &loaded{epoch: epoch, last: seq, answers: w.js.state(set)}
		if w.cfg.Broken == "replay" {
			ld.answers = map[uint64]int64{}
		}
		g.sets[set] = ld
		w.log("%s serves SET %d at epoch %d", g.name, set, epoch)
		g.step(placement.Served{Set: set})
		done(nil)
	})
}

// request is a money request reaching g: answered from the SET's kept
// answers, or drawn and made durable in the SET's next round.
func (g *gateway) request(r *request, answer func(kind int, amount int64, node int)) {
	set := r.set
	switch {
	case g.fenced:
		answer(moved, 0, -1)
		return
	case !g.m.Tells(set):
		answer(moved, 0, g.view[set].Node)
		return
	}
	ld := g.sets[set]
	if ld == nil {
		g.w.fail("%s tells SET %d with nothing of it loaded", g.name, set)
		return
	}
	if ld.leaving {
		answer(retry, 0, -1)
		return
	}
	if a, ok := ld.answers[r.id]; ok {
		g.w.toldMoney(g, set, ld.epoch, r, a)
		answer(told, a, g.node)
		return
	}
	for _, q := range slices.Concat(ld.round, ld.batch) {
		if q.id == r.id {
			return // on its way: the client asks again
		}
	}
	r.answer = answer
	ld.batch = append(ld.batch, r)
	if ld.round == nil {
		g.roundOf(set, ld)
	}
}

// roundOf appends set's batch as one round, after the SET's last message
// g knows.
func (g *gateway) roundOf(set int, ld *loaded) {
	w := g.w
	ld.round, ld.batch = ld.batch, nil
	answers := make([]answer, len(ld.round))
	for i, r := range ld.round {
		answers[i] = answer{id: r.id, amount: 1 + w.rng.Int64N(200)}
	}
	var seq uint64
	var try func()
	try = func() {
		g.js(func() bool {
			var ok bool
			seq, ok = w.js.appendRound(set, g.node, ld.epoch, ld.last, answers)
			if ok {
				w.durable(set, answers)
			}
			return ok
		}, func(ok, acked bool) {
			switch {
			case !acked && w.cfg.Broken != "inflight":
				g.later(100*time.Millisecond, try) // held until JetStream answers
				return
			case !ok:
				w.log("%s: its round of SET %d is fenced", g.name, set)
				ld.round = nil
				g.step(placement.Refused{Set: set, Why: "a round fenced"})
				g.ready()
				return
			}
			ld.last = seq
			for i, r := range ld.round {
				ld.answers[r.id] = answers[i].amount
				w.toldMoney(g, set, ld.epoch, r, answers[i].amount)
				r.answer(told, answers[i].amount, g.node)
			}
			ld.round = nil
			switch {
			case ld.cutting != nil:
				f := ld.cutting
				ld.cutting = nil
				f()
			case len(ld.batch) > 0:
				g.roundOf(set, ld)
			}
		})
	}
	try()
}
