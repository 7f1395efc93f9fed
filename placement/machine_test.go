package placement

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The machine is driven through every transition by a table: each case
// brings SET 0 (of 4, on gateway 0 of 3) to a state with the steps given,
// steps one event, and checks the SET's state, what the machine asks of
// its driver and its refusal. No NATS, no clock, no goroutine.

var t0 = time.Unix(1_000_000, 0)

const lease = time.Second

func at(d time.Duration) time.Time { return t0.Add(d) }

// tick is a tick at d of a cluster of gateways 0, 1, 2, all live and
// current, with owner the SETs' owners (-1 none).
func tick(d time.Duration, owner ...int) Tick {
	t := Tick{Now: at(d), Current: true, Live: []int{0, 1, 2}, Heard: []int{0, 1, 2}, Takers: []int{0, 1, 2}}
	for _, o := range owner {
		t.Owner = append(t.Owner, Owner{Node: o, Epoch: 1})
	}
	return t
}

// ticks are ticks every Beat from from to to, as the driver's, with owner.
func ticks(from, to time.Duration, owner ...int) []Event {
	var out []Event
	for d := from; d <= to; d += Beat {
		out = append(out, tick(d, owner...))
	}
	return out
}

// serving brings SET 0 to Serving at epoch 2.
var serving = []Event{Claimed{Set: 0, Epoch: 2, Seq: 10, Name: "gw0"}, Served{Set: 0}}

// movingOut brings SET 0 to a move out to gateway 1.
var movingOut = append(serving[:2:2], MoveOut{Set: 0, To: 1, ToName: "gw1", Taker: true, Now: at(0)})

// followingIn brings SET 0 to a move in from gateway 1, caught up.
var followingIn = []Event{PrepareIn{Set: 0, From: 1, Owner: 1, Now: at(0)}, CaughtUp{Set: 0}}

// notTaker is a tick at d at which gateway 0 takes no SETs: it wants no
// standby.
func notTaker(d time.Duration, owner ...int) Tick {
	t := tick(d, owner...)
	t.Takers = []int{1, 2}
	return t
}

// standbyOf1 brings SET 1, run by gateway 1, to a standby here, started:
// were gateway 1 gone, gateway 0 would claim SETs 0 and 1 (Standbys); SET 0
// runs here.
var standbyOf1 = cat(serving, ticks(JoinWait, JoinWait+StandbySettle, 0, 1, 2, 2), []Event{StandbyStarted{Set: 1}})

// lingering is ticks after standbyOf1 for d at which SET 1 is no longer
// wanted here.
func lingering(d time.Duration) []Event {
	var out []Event
	for e := JoinWait + StandbySettle + Beat; e <= JoinWait+StandbySettle+d; e += Beat {
		out = append(out, notTaker(e, 0, 1, 2, 2))
	}
	return out
}

func cat(steps ...[]Event) []Event {
	var out []Event
	for _, s := range steps {
		out = append(out, s...)
	}
	return out
}

func TestMachineTransitions(t *testing.T) {
	stopped := errors.New("the follow stopped")
	cases := []struct {
		name  string
		given []Event
		ev    Event
		set   int // the SET checked, 0 unless said
		role  Role
		phase Phase
		tells bool
		ready Ready
		err   error
	}{
		// Claims.
		{name: "started", ev: Start{Now: t0}},
		{name: "no claim within JoinWait of a start", given: cat(ticks(Beat, JoinWait, -1, -1, -1, -1), []Event{Start{Now: at(JoinWait + Beat)}}, ticks(JoinWait+2*Beat, 2*JoinWait, -1, -1, -1, -1)),
			ev: tick(2*JoinWait+Beat-Beat/2, -1, -1, -1, -1)},
		{name: "no claim before JoinWait", ev: tick(JoinWait-Beat, -1, -1, -1, -1)},
		{name: "its share of the orphans once joined", given: ticks(Beat, JoinWait-Beat, -1, -1, -1, -1), ev: tick(JoinWait, -1, -1, -1, -1),
			ready: Ready{Take: []int{0, 3}}},
		{name: "no claim while not current", given: ticks(Beat, JoinWait, -1, -1, -1, -1),
			ev: Tick{Now: at(JoinWait + Beat), Owner: []Owner{{Node: -1}, {Node: -1}, {Node: -1}, {Node: -1}}, Live: []int{0}, Takers: []int{0}}},
		{name: "not current: a lease before it claims again", given: cat(ticks(Beat, JoinWait, -1, -1, -1, -1),
			[]Event{Tick{Now: at(JoinWait + Beat), Live: []int{0}, Takers: []int{0}}}, ticks(JoinWait+2*Beat, JoinWait+lease, -1, -1, -1, -1)),
			ev: tick(JoinWait+lease+Beat, -1, -1, -1, -1), ready: Ready{Take: []int{0, 3}}},
		{name: "ticks missed (a pause): no claim", given: ticks(Beat, JoinWait, -1, -1, -1, -1), ev: tick(JoinWait+5*Beat, -1, -1, -1, -1)},
		{name: "its own claim not run here: claimed again", given: ticks(Beat, JoinWait, 1, 1, 2, 2), ev: tick(JoinWait+Beat, 0, 1, 2, 2),
			ready: Ready{Take: []int{0}}},
		{name: "a SET moving out is not an orphan", given: cat(movingOut, ticks(Beat, JoinWait, 0, 1, 2, 1)), ev: tick(JoinWait+Beat, 0, 1, 2, 1),
			role: MovingOut, phase: Preparing, tells: true},
		{name: "claimed", ev: Claimed{Set: 0, Epoch: 2, Seq: 10}, role: Taking, phase: Loading},
		{name: "claimed while following it for a move: the move dropped", given: followingIn, ev: Claimed{Set: 0, Epoch: 2, Seq: 10},
			role: Taking, phase: Loading, ready: Ready{Drop: []Drop{{Set: 0, Role: MovingIn, Why: "its source is gone: taken over from JetStream"}}}},
		{name: "claimed by its switch", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}), ev: Claimed{Set: 0, Epoch: 2, Seq: 10},
			role: MovingIn, phase: Switching},
		{name: "served", given: serving[:1], ev: Served{Set: 0}, role: Serving, tells: true},
		{name: "a take failed after its claim: lost", given: serving[:1], ev: Failed{Set: 0, Why: "load"}, role: Taking, phase: Loading,
			ready: Ready{Lost: &Loss{Set: 0, Why: "load"}}},

		// Losses and routes.
		{name: "a round fenced while serving: lost", given: serving, ev: Refused{Set: 0, Why: "fenced"}, role: Serving, tells: true,
			ready: Ready{Lost: &Loss{Set: 0, Why: "fenced"}}},
		{name: "a round fenced of a SET not told here: nothing", ev: Refused{Set: 0, Why: "fenced"}},
		{name: "another's claim while serving: lost", given: serving, ev: ClaimHeard{Set: 0, Now: Owner{Node: 1, Name: "gw1", Epoch: 3}},
			role: Serving, tells: true, ready: Ready{Lost: &Loss{Set: 0, Why: "gateway 1 (gw1) claimed it at epoch 3"}}},
		{name: "its node's claim at another epoch while serving: lost", given: serving, ev: ClaimHeard{Set: 0, Now: Owner{Node: 0, Epoch: 3}},
			role: Serving, tells: true, ready: Ready{Lost: &Loss{Set: 0, Why: "its last claim is this node's at epoch 3, not this gateway's 2: another process runs as -node 0"}}},
		{name: "its own claim heard: nothing", given: serving, ev: ClaimHeard{Set: 0, Now: Owner{Node: 0, Epoch: 2}}, role: Serving, tells: true},
		{name: "another's claim of a SET away: routed", ev: ClaimHeard{Set: 0, Now: Owner{Node: 2, Epoch: 3}}, ready: Ready{Route: []Route{{0, 2}}}},
		{name: "the target's claim while moving out: routed", given: movingOut, ev: ClaimHeard{Set: 0, Now: Owner{Node: 1, Epoch: 3}},
			role: MovingOut, phase: Preparing, tells: true, ready: Ready{Route: []Route{{0, 1}}}},
		{name: "nothing after a loss", given: cat(ticks(Beat, JoinWait, 1, 1, 1, 1), serving, []Event{Failed{Set: 0}}), ev: tick(JoinWait+Beat, -1, -1, -1, -1),
			role: Serving, tells: true},

		// Loads.
		{name: "a first load: nothing to renew", ev: Blank{Set: 0}},
		{name: "a load after a use: renewed", given: []Event{Blank{Set: 0}}, ev: Blank{Set: 0}, ready: Ready{Renew: []int{0}}},

		// Standbys.
		{name: "a standby wanted, not settled: not started", set: 1, given: cat(serving, ticks(JoinWait, JoinWait+StandbySettle-2*Beat, 0, 1, 2, 2)),
			ev: tick(JoinWait+StandbySettle-Beat, 0, 1, 2, 2)},
		{name: "a standby settled: started", set: 1, given: cat(serving, ticks(JoinWait, JoinWait+StandbySettle-Beat, 0, 1, 2, 2)),
			ev: tick(JoinWait+StandbySettle, 0, 1, 2, 2), role: Standby, phase: Starting, ready: Ready{Follow: []int{1}}},
		{name: "a standby started", set: 1, given: standbyOf1[:len(standbyOf1)-1], ev: StandbyStarted{Set: 1}, role: Standby, phase: Following},
		{name: "a standby that failed to start", set: 1, given: standbyOf1[:len(standbyOf1)-1], ev: StandbyStarted{Set: 1, Err: stopped}},
		{name: "a standby whose follow stopped: dropped, and started again", set: 1, given: standbyOf1, role: Standby, phase: Starting,
			ev:    Tick{Now: at(JoinWait + StandbySettle + Beat), Current: true, Owner: []Owner{{Node: 0}, {Node: 1}, {Node: 2}, {Node: 2}}, Live: []int{0, 1, 2}, Heard: []int{0, 1, 2}, Takers: []int{0, 1, 2}, Stopped: []int{1}},
			ready: Ready{Drop: []Drop{{Set: 1, Role: Standby, Failed: true, Why: "no longer this gateway's to follow"}}, Follow: []int{1}}},
		{name: "a standby no longer wanted lingers", set: 1, given: cat(standbyOf1, lingering(StandbyLinger)),
			ev: notTaker(JoinWait+StandbySettle+StandbyLinger+Beat, 0, 1, 2, 2), role: Standby, phase: Following},
		{name: "a standby no longer wanted: dropped after the linger", set: 1, given: cat(standbyOf1, lingering(StandbyLinger+Beat)),
			ev: notTaker(JoinWait+StandbySettle+StandbyLinger+2*Beat, 0, 1, 2, 2), ready: Ready{Drop: []Drop{{Set: 1, Role: Standby, Why: "no longer this gateway's to follow"}}}},
		{name: "a standby of a SET whose owner went unheard is kept", set: 1, given: standbyOf1,
			ev:   Tick{Now: at(JoinWait + StandbySettle + Beat), Current: true, Owner: []Owner{{Node: 0}, {Node: 1}, {Node: 2}, {Node: 2}}, Live: []int{0, 1, 2}, Heard: []int{0, 2}, Takers: []int{0, 1, 2}},
			role: Standby, phase: Following},
		{name: "leaving: standbys dropped", set: 1, given: append(standbyOf1[:len(standbyOf1):len(standbyOf1)], Leave{}),
			ev: tick(JoinWait+StandbySettle+Beat, 0, 1, 2, 2), ready: Ready{Drop: []Drop{{Set: 1, Role: Standby, Why: "no longer this gateway's to follow"}}}},
		{name: "leaving: nothing until the next tick", set: 1, given: standbyOf1, ev: Leave{}, role: Standby, phase: Following},
		{name: "-rebalance set", ev: Rebalance{Every: time.Second}},
		{name: "a standby claimed: taken over", set: 1, given: standbyOf1, ev: Claimed{Set: 1, Epoch: 2, Seq: 9}, role: Taking, phase: Loading},

		// Moves out.
		{name: "a move out", given: serving, ev: MoveOut{Set: 0, To: 1, ToName: "gw1", Taker: true, Now: at(0)}, role: MovingOut, phase: Preparing, tells: true},
		{name: "a move out of a SET not run here", ev: MoveOut{Set: 0, To: 1, Taker: true}, err: ErrNotHere},
		{name: "a second move out at once", given: movingOut, set: 1, ev: MoveOut{Set: 1, To: 1, Taker: true}, err: ErrMoveBusy},
		{name: "a move out to no gateway", given: serving, ev: MoveOut{Set: 0, To: -1, ToName: "gw9"}, role: Serving, tells: true, err: ErrNoGateway},
		{name: "a move out to itself", given: serving, ev: MoveOut{Set: 0, To: 0, Taker: true}, role: Serving, tells: true, err: ErrThere},
		{name: "a move out to a gateway that takes none", given: serving, ev: MoveOut{Set: 0, To: 1}, role: Serving, tells: true, err: ErrNotTaker},
		{name: "a move out cutting", given: movingOut, ev: MovePhase{Set: 0, Move: 1, Phase: Cutting}, role: MovingOut, phase: Cutting, tells: true},
		{name: "a move out cut: told here no more", given: append(movingOut[:3:3], MovePhase{Set: 0, Move: 1, Phase: Cutting}), ev: Cut{Set: 0, Move: 1}, role: MovingOut, phase: Cutting},
		{name: "a move out ended after the cut", given: append(movingOut[:3:3], MovePhase{Set: 0, Move: 1, Phase: Cutting}, Cut{Set: 0, Move: 1}, MovePhase{Set: 0, Move: 1, Phase: Switching}),
			ev: MoveEnded{Set: 0, Move: 1}},
		{name: "a move out failed before the cut: served on", given: movingOut, ev: MoveEnded{Set: 0, Move: 1}, role: Serving, tells: true},
		// Move 1 waited on its target while the SET was taken back here
		// (the target unheard) and moved again: its end, late, is not
		// move 2's, which goes on (its cut would otherwise leave the SET
		// "serving" with nothing running it).
		{name: "a stale move's end leaves the next move be", given: cat(movingOut, []Event{MovePhase{Set: 0, Move: 1, Phase: Cutting}, Cut{Set: 0, Move: 1},
			MovePhase{Set: 0, Move: 1, Phase: Switching}, Claimed{Set: 0, Epoch: 3}, Served{Set: 0}, MoveOut{Set: 0, To: 1, ToName: "gw1", Taker: true, Now: at(0)}}),
			ev: MoveEnded{Set: 0, Move: 1}, role: MovingOut, phase: Preparing, tells: true},
		{name: "a claim by another during a cut move: no loss", given: append(movingOut[:3:3], Cut{Set: 0, Move: 1}), ev: ClaimHeard{Set: 0, Now: Owner{Node: 1, Epoch: 3}},
			role: MovingOut, phase: Preparing, ready: Ready{Route: []Route{{0, 1}}}},

		// Moves in.
		{name: "a move in", ev: PrepareIn{Set: 0, From: 1, Owner: 1, Now: at(0)}, role: MovingIn, phase: Following},
		{name: "a move in of a SET run here", given: serving, ev: PrepareIn{Set: 0, From: 1, Owner: 0}, role: Serving, tells: true, err: errAny},
		{name: "a move in from a gateway that does not own it", ev: PrepareIn{Set: 0, From: 1, Owner: 2}, err: ErrNotSource},
		{name: "a second move in", given: followingIn, ev: PrepareIn{Set: 0, From: 1, Owner: 1}, role: MovingIn, phase: Following, err: errAny},
		{name: "a move in from its standby", set: 1, given: standbyOf1, ev: PrepareIn{Set: 1, From: 1, Owner: 1, Now: at(0)}, role: MovingIn, phase: Following},
		{name: "a move in caught up", given: followingIn[:1], ev: CaughtUp{Set: 0}, role: MovingIn, phase: Following},
		{name: "a move in caught up after it was given up", ev: CaughtUp{Set: 0}, err: ErrNotPrepped},
		{name: "a switch before the catch-up", given: followingIn[:1], ev: SwitchIn{Set: 0, From: 1}, role: MovingIn, phase: Following, err: ErrNotPrepped},
		{name: "a switch from another source", given: followingIn, ev: SwitchIn{Set: 0, From: 2}, role: MovingIn, phase: Following, err: ErrNotPrepped},
		{name: "a switch", given: followingIn, ev: SwitchIn{Set: 0, From: 1}, role: MovingIn, phase: Switching},
		{name: "a switch served", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}, Claimed{Set: 0, Epoch: 2}), ev: Served{Set: 0}, role: Serving, tells: true},
		{name: "a switch failed after its claim: lost", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}, Claimed{Set: 0, Epoch: 2}), ev: Failed{Set: 0, Why: "x"},
			role: MovingIn, phase: Switching, ready: Ready{Lost: &Loss{Set: 0, Why: "x"}}},
		{name: "a move in ended unserved", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}), ev: InEnded{Set: 0}},
		{name: "a move in ended served: nothing", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}, Served{Set: 0}), ev: InEnded{Set: 0}, role: Serving, tells: true},
		{name: "a move in given up", given: followingIn, ev: AbortIn{Set: 0, Why: "gone"}, ready: Ready{Drop: []Drop{{Set: 0, Role: MovingIn, Why: "gone"}}}},
		{name: "a move in switching is not given up", given: append(followingIn[:2:2], SwitchIn{Set: 0, From: 1}), ev: AbortIn{Set: 0}, role: MovingIn, phase: Switching},
		{name: "a move in whose SET another claimed: dropped", given: cat(followingIn, ticks(Beat, JoinWait, 1, 1, 2, 2)), ev: tick(JoinWait+Beat, 2, 1, 2, 2),
			ready: Ready{Drop: []Drop{{Set: 0, Role: MovingIn, Why: "its source did not hand it over"}}}},
		{name: "a move in never switched: kept until FollowIdle", given: cat(followingIn, ticks(Beat, FollowIdle-Beat, 1, 1, 2, 2)), ev: tick(FollowIdle, 1, 1, 2, 2),
			role: MovingIn, phase: Following},
		{name: "a move in never switched: dropped after FollowIdle, a standby instead", given: cat(followingIn, ticks(Beat, FollowIdle, 1, 1, 2, 2)), ev: tick(FollowIdle+Beat, 1, 1, 2, 2),
			role: Standby, phase: Starting, ready: Ready{Drop: []Drop{{Set: 0, Role: MovingIn, Why: "its source did not hand it over"}}, Follow: []int{0}}},

		// Stops.
		{name: "released at a stop", given: serving, ev: Release{Set: 0}},
		{name: "a SET not told here is not released", ev: Release{Set: 0}, err: ErrNotHere},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := New(Config{Node: 0, Sets: 4, Lease: lease, Standby: true, Rebalance: -1}, t0)
			for i, ev := range c.given {
				if err := m.Step(ev); err != nil {
					t.Fatalf("given step %d (%T): %v", i, ev, err)
				}
			}
			m.Ready()
			err := m.Step(c.ev)
			switch {
			case c.err == errAny && err == nil, c.err != errAny && !errors.Is(err, c.err):
				t.Errorf("Step(%T) = %v; want %v", c.ev, err, c.err)
			}
			st := m.SET(c.set)
			if st.Role != c.role || st.Phase != c.phase || st.Tells() != c.tells {
				t.Errorf("SET %d is %v (tells %v); want %v/%v (tells %v)", c.set, st, st.Tells(), c.role, c.phase, c.tells)
			}
			if got := m.Ready(); !reflect.DeepEqual(got, c.ready) {
				t.Errorf("Ready = %+v; want %+v", got, c.ready)
			}
		})
	}
}

// errAny is any refusal.
var errAny = errors.New("any error")

func TestMachineRebalance(t *testing.T) {
	m := New(Config{Node: 0, Sets: 6, Lease: lease, Rebalance: time.Second}, t0)
	for set := range 4 {
		for _, ev := range []Event{Claimed{Set: set, Epoch: 1}, Served{Set: set}} {
			m.Step(ev)
		}
	}
	owner := []int{0, 0, 0, 0, 1, 1}
	for _, ev := range ticks(Beat, JoinWait-Beat, owner...) {
		m.Step(ev)
	}
	m.Ready()
	// Gateway 2 joined with none: gateway 0, over its share, hands it its
	// highest SET; then waits -rebalance before the next.
	ev := tick(JoinWait, owner...)
	m.Step(ev)
	if rd := m.Ready(); !reflect.DeepEqual(rd.Move, []Move{{Set: 3, To: 2}}) {
		t.Fatalf("Move = %v; want SET 3 to gateway 2", rd.Move)
	}
	ev.Now = ev.Now.Add(Beat)
	m.Step(ev)
	if rd := m.Ready(); rd.Move != nil {
		t.Fatalf("a second move within -rebalance: %v", rd.Move)
	}
	// Leaving: no rebalancing (the drain hands everything over itself).
	m.Step(Leave{})
	ev.Now = ev.Now.Add(2 * time.Second)
	m.Step(ev)
	if rd := m.Ready(); rd.Move != nil {
		t.Fatalf("a move while leaving: %v", rd.Move)
	}
}

// TestMachineOneTeller runs two machines, gateways 0 and 1, through a
// failover and a move as their drivers would, and checks after every step
// that no two tell one SET's money at once.
func TestMachineOneTeller(t *testing.T) {
	cfg := Config{Sets: 2, Lease: lease, Rebalance: -1}
	a, b := New(cfg, t0), New(Config{Node: 1, Sets: 2, Lease: lease, Rebalance: -1}, t0)
	check := func(when string) {
		t.Helper()
		for set := range 2 {
			if a.Tells(set) && b.Tells(set) {
				t.Fatalf("%s: SET %d told by both gateways", when, set)
			}
		}
	}
	step := func(m *Machine, ev Event) {
		t.Helper()
		if err := m.Step(ev); err != nil {
			t.Fatalf("%T: %v", ev, err)
		}
		check("after " + reflect.TypeOf(ev).Name())
	}
	// Gateway 0 owns both; gateway 1 takes SET 1 by a move.
	for set := range 2 {
		step(a, Claimed{Set: set, Epoch: 1})
		step(a, Served{Set: set})
	}
	step(a, MoveOut{Set: 1, To: 1, ToName: "gw1", Taker: true})
	step(b, PrepareIn{Set: 1, From: 0, Owner: 0})
	step(b, CaughtUp{Set: 1})
	step(a, MovePhase{Set: 1, Move: 1, Phase: Cutting})
	step(a, Cut{Set: 1, Move: 1})
	step(a, MovePhase{Set: 1, Move: 1, Phase: Switching})
	step(b, SwitchIn{Set: 1, From: 0})
	step(b, Claimed{Set: 1, Epoch: 2})
	step(a, ClaimHeard{Set: 1, Now: Owner{Node: 1, Epoch: 2}})
	step(b, Served{Set: 1})
	step(a, MoveEnded{Set: 1, Move: 1})
	step(b, InEnded{Set: 1})
	if a.Lost() != nil || b.Lost() != nil || !a.SET(0).Tells() || !b.SET(1).Tells() {
		t.Fatalf("after the move: %v, %v; want SET 0 on gateway 0, SET 1 on 1, none lost", a.Sets(), b.Sets())
	}
	// Gateway 1 claims SET 0 (gateway 0 unheard for a lease): gateway 0,
	// hearing the claim, stops telling it — it is lost.
	step(b, Claimed{Set: 0, Epoch: 2})
	step(a, ClaimHeard{Set: 0, Now: Owner{Node: 1, Epoch: 2}})
	if a.Lost() == nil {
		t.Fatal("gateway 0 heard its SET claimed by another and did not stop")
	}
	step(b, Served{Set: 0})
}

// TestEveryEventDriven fails when an event type of events.go has no case
// in TestMachineTransitions' table that steps it: a new event comes with its
// transitions tested.
func TestEveryEventDriven(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "event" && fn.Recv != nil {
			events = append(events, fn.Recv.List[0].Type.(*ast.Ident).Name)
		}
	}
	src, err := os.ReadFile("machine_test.go")
	if err != nil {
		t.Fatal(err)
	}
	table := string(src[bytes.Index(src, []byte("func TestMachineTransitions")):bytes.Index(src, []byte("func TestEveryEventDriven"))])
	for _, ev := range events {
		if !regexp.MustCompile(`\bev: (` + ev + `\{|` + strings.ToLower(ev[:1]) + ev[1:] + `\()`).MatchString(table) {
			t.Errorf("no case of TestMachineTransitions steps a %s", ev)
		}
	}
	if len(events) < 20 {
		t.Fatalf("found %d event types in events.go: the parse is wrong", len(events))
	}
}
