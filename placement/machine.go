package placement

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Timing of the claims and the standbys.
const (
	// Beat is how often the driver ticks the machine.
	Beat = 250 * time.Millisecond
	// JoinWait: a gateway started with the others claims only once it has
	// heard them for this long, so that the first does not take every SET.
	JoinWait = time.Second
	// StandbySettle and StandbyLinger damp the standbys' churn while SETs
	// move: each start loads a snapshot.
	StandbySettle = time.Second
	StandbyLinger = 30 * time.Second
	// FollowIdle: a move in prepared and never switched (its source gone)
	// is dropped after this.
	FollowIdle = 2 * time.Minute
)

// Errors of a move refused by the machine.
var (
	ErrMoveBusy   = errors.New("a move of this gateway's is under way: one at a time")
	ErrNotHere    = errors.New("the SET does not run on this gateway")
	ErrNoGateway  = errors.New("no such gateway is up")
	ErrThere      = errors.New("the SET runs there already")
	ErrNotTaker   = errors.New("the gateway takes no SETs now")
	ErrNotSource  = errors.New("the SET's last claim names another gateway than the move's source")
	ErrNotPrepped = errors.New("the SET is not followed here for that source")
)

// Config is a gateway's part in the placement.
type Config struct {
	Node    int           // this gateway's node number
	Sets    int           // the cluster's -sets
	Lease   time.Duration // -lease
	Standby bool          // -standby: follow the SETs this gateway would take over
	// Rebalance is -rebalance: how often at most a SET is handed to a
	// gateway that runs fewer than its share; negative, never.
	Rebalance time.Duration
}

// Machine is one gateway's view of the SETs' placement: who owns each SET,
// and what this gateway does with it. Its driver steps it with what
// happened (Step) and carries out what it answers (Ready): no goroutine,
// clock, connection or socket of its own, as etcd raft's Node. Every
// transition is in this file.
//
// Invariants, which the driver keeps by carrying out Ready:
//   - at most one gateway tells a SET's money at any epoch: this one only
//     while the SET's last claim it knows is its own (a claim by another
//     heard while it tells the SET is a loss: it stops);
//   - a SET is never without an owner for longer than the lease: each
//     tick claims this gateway's share of the SETs whose owner is not live
//     (ToClaim), once it has shown for a lease that NATS carries for it;
//   - a move completes or leaves the SET with its old owner: until the
//     cut the source serves, after it the SET's last claim decides, and a
//     source whose move failed after the cut claims the SET again (its
//     claim still names it);
//   - a SET has one role here at a time: a standby that is taken over, or
//     followed for a move, becomes that.
//
// Rejected designs: the SET's state in parallel maps and atomics beside
// the code that drives it (the moves' edge cases were found in demos, not
// seen in code); a goroutine per SET (the transitions of several SETs must
// be decided from one view, e.g. a tick's claims and standbys); a
// consensus of our own on who owns a SET (the claims in the journal's
// stream, fenced by JetStream, decide it).
type Machine struct {
	cfg  Config
	sets []SET

	leaving bool
	lost    *Loss
	// claimFrom: no claims before it (joining, a pause, not current);
	// lastTick, to see a pause; lastMove, the last rebalancing move.
	claimFrom, lastTick, lastMove time.Time
	// moves numbers the moves out.
	moves uint64

	ready Ready
}

// New returns the machine of a gateway that owns nothing yet, started at
// now.
func New(cfg Config, now time.Time) *Machine {
	m := &Machine{cfg: cfg, sets: make([]SET, cfg.Sets), claimFrom: now.Add(JoinWait), lastTick: now}
	for i := range m.sets {
		m.sets[i] = SET{Owner: Owner{Node: -1}, Peer: -1}
	}
	return m
}

// Step applies ev. An error refuses it and changes nothing.
func (m *Machine) Step(ev Event) error {
	switch ev := ev.(type) {
	case Start:
		m.claimFrom, m.lastTick = ev.Now.Add(JoinWait), ev.Now
	case Tick:
		m.tick(ev)
	case ClaimHeard:
		st := &m.sets[ev.Set]
		st.Owner = ev.Now
		if ev.Now.Node == m.cfg.Node {
			if st.Tells() && ev.Now.Epoch != st.Epoch {
				m.lose(ev.Set, fmt.Sprintf("its last claim is this node's at epoch %d, not this gateway's %d: another process runs as -node %d", ev.Now.Epoch, st.Epoch, m.cfg.Node))
			}
			return nil // this gateway's own claim: the take routes it
		}
		if st.Tells() && st.Role != MovingOut {
			m.lose(ev.Set, fmt.Sprintf("gateway %d (%s) claimed it at epoch %d", ev.Now.Node, ev.Now.Name, ev.Now.Epoch))
			return nil
		}
		m.ready.Route = append(m.ready.Route, Route{ev.Set, ev.Now.Node})
	case Claimed:
		st := &m.sets[ev.Set]
		st.Epoch, st.ClaimSeq = ev.Epoch, ev.Seq
		st.Owner = Owner{Node: m.cfg.Node, Name: ev.Name, Epoch: ev.Epoch}
		if st.Role == MovingIn && st.Phase == Switching {
			return nil // a move's switch: it serves next
		}
		if st.Role == MovingIn {
			m.ready.Drop = append(m.ready.Drop, Drop{Set: ev.Set, Role: MovingIn, Why: "its source is gone: taken over from JetStream"})
		}
		m.become(ev.Set, Taking, Loading)
	case Served:
		m.become(ev.Set, Serving, None)
	case Failed:
		m.lose(ev.Set, ev.Why)
	case Refused:
		if m.sets[ev.Set].Tells() {
			m.lose(ev.Set, ev.Why)
		}
	case Blank:
		st := &m.sets[ev.Set]
		if st.Used {
			m.ready.Renew = append(m.ready.Renew, ev.Set)
		}
		st.Used = true
	case StandbyStarted:
		st := &m.sets[ev.Set]
		if st.Role != Standby || st.Phase != Starting {
			return nil // taken over, or followed for a move, meanwhile
		}
		if ev.Err != nil {
			m.become(ev.Set, Away, None)
			return nil
		}
		st.Phase = Following
	case MoveOut:
		return m.moveOut(ev)
	case MovePhase:
		if st := &m.sets[ev.Set]; st.Role == MovingOut && st.Move == ev.Move {
			st.Phase = ev.Phase
		}
	case Cut:
		if st := &m.sets[ev.Set]; st.Role == MovingOut && st.Move == ev.Move {
			st.Cut = true
		}
	case MoveEnded:
		st := &m.sets[ev.Set]
		if st.Role != MovingOut || st.Move != ev.Move {
			return nil
		}
		if st.Phase >= Cutting {
			st.Used = true
		}
		if st.Cut {
			// The claim names the target if the switch got that far; else
			// this gateway, which claims the SET again (ToClaim).
			m.become(ev.Set, Away, None)
		} else {
			m.become(ev.Set, Serving, None)
		}
	case PrepareIn:
		return m.prepareIn(ev)
	case CaughtUp:
		st := &m.sets[ev.Set]
		if st.Role != MovingIn {
			return fmt.Errorf("SET %d is no longer followed here: %w", ev.Set, ErrNotPrepped)
		}
		st.CaughtUp = true
	case SwitchIn:
		st := &m.sets[ev.Set]
		if st.Role != MovingIn || !st.CaughtUp || st.Peer != ev.From || st.Phase == Switching {
			return fmt.Errorf("SET %d is not followed here for gateway %d: %w", ev.Set, ev.From, ErrNotPrepped)
		}
		st.Phase = Switching
	case InEnded:
		if st := &m.sets[ev.Set]; st.Role == MovingIn {
			m.become(ev.Set, Away, None)
		}
	case AbortIn:
		if st := &m.sets[ev.Set]; st.Role == MovingIn && st.Phase != Switching {
			m.become(ev.Set, Away, None)
			m.ready.Drop = append(m.ready.Drop, Drop{Set: ev.Set, Role: MovingIn, Why: ev.Why})
		}
	case Release:
		st := &m.sets[ev.Set]
		if !st.Tells() {
			return ErrNotHere
		}
		m.become(ev.Set, Away, None)
	case Leave:
		m.leaving = true
	case Rebalance:
		m.cfg.Rebalance = ev.Every
	default:
		return fmt.Errorf("placement: an event of no known kind %T", ev)
	}
	return nil
}

// Ready returns what the steps since the last call ask of the driver.
func (m *Machine) Ready() Ready {
	rd := m.ready
	m.ready = Ready{}
	return rd
}

// become puts a SET in role and phase. A new role begins at the last tick
// (an event without a clock of its own) and forgets the move it ended.
func (m *Machine) become(set int, role Role, phase Phase) {
	st := &m.sets[set]
	if st.Role != role {
		st.Since = m.lastTick
	}
	st.Role, st.Phase = role, phase
	if role != MovingIn && role != MovingOut {
		st.Peer, st.PeerName, st.CaughtUp, st.Cut = -1, "", false, false
	}
}

// lose stops this gateway: the first loss is its reason.
func (m *Machine) lose(set int, why string) {
	if m.lost != nil {
		return
	}
	m.lost = &Loss{Set: set, Why: why}
	m.ready.Lost = m.lost
}

// tick claims this gateway's share of the SETs that need an owner, drops
// the follows that are no longer useful, starts a standby, and hands a SET
// out to even the cluster out.
func (m *Machine) tick(ev Tick) {
	if m.lost != nil {
		return
	}
	now := ev.Now
	// Ticks missed: this process was paused (SIGSTOP, a stalled VM) and
	// what it last heard is stale — the others look dead. So do they while
	// it is not current (it must not conclude, hearing nobody, that
	// everybody else is dead). It hears them for a lease before it claims.
	if now.Sub(m.lastTick) > 4*Beat || !ev.Current {
		m.claimFrom = now.Add(m.cfg.Lease)
	}
	m.lastTick = now
	if now.Before(m.claimFrom) {
		return
	}
	owner := make([]int, len(m.sets))
	running := make([]bool, len(m.sets))
	for set := range m.sets {
		st := &m.sets[set]
		if set < len(ev.Owner) {
			st.Owner = ev.Owner[set]
		}
		owner[set] = st.Owner.Node
		// A SET handed out is still this gateway's until its claim names
		// the target; from then on the target's, lease and all.
		running[set] = st.Tells() || st.Role == MovingOut && owner[set] == m.cfg.Node || st.Role == MovingIn && st.Phase == Switching
	}
	m.ready.Take = ToClaim(owner, running, ev.Live, ev.Takers, m.cfg.Node)
	m.dropStale(now, owner)
	m.standBy(now, owner, ev)
	m.rebalance(now, owner, ev.Takers)
}

// dropStale drops the moves in prepared and never switched within
// FollowIdle, and those whose SET's claim names neither their source nor
// this gateway any more.
func (m *Machine) dropStale(now time.Time, owner []int) {
	for set := range m.sets {
		st := &m.sets[set]
		if st.Role == MovingIn && st.CaughtUp && st.Phase != Switching &&
			(now.Sub(st.Since) > FollowIdle || owner[set] != st.Peer && owner[set] != m.cfg.Node) {
			m.become(set, Away, None)
			m.ready.Drop = append(m.ready.Drop, Drop{Set: set, Role: MovingIn, Why: "its source did not hand it over"})
		}
	}
}

// standBy makes the SETs followed here those Standbys gives this gateway,
// and starts one more at a time (a start loads a snapshot). Moves shift the
// assignment back and forth, so a SET is started only once it has been
// wanted for StandbySettle and no move is under way here, and one no longer
// wanted lingers for StandbyLinger before it is dropped; one whose follow
// stopped goes at once.
func (m *Machine) standBy(now time.Time, owner []int, ev Tick) {
	on := m.cfg.Standby && !m.leaving
	var want []int
	if on {
		want = Standbys(owner, ev.Heard, ev.Takers, m.cfg.Node)
	}
	starting, moving := false, false
	for set := range m.sets {
		st := &m.sets[set]
		wanted := slices.Contains(want, set)
		switch {
		case !wanted:
			st.Wanted = time.Time{}
		case st.Wanted.IsZero():
			st.Wanted = now
		}
		switch st.Role {
		case MovingIn, MovingOut:
			moving = true
		case Standby:
			if st.Phase == Starting {
				starting = true
				continue
			}
			// A SET whose owner went unheard keeps its standby until
			// someone claims it: that is what the standby is for.
			switch {
			case wanted || on && !slices.Contains(ev.Heard, owner[set]):
				st.Unwanted = time.Time{}
			case st.Unwanted.IsZero():
				st.Unwanted = now
			}
			stopped := slices.Contains(ev.Stopped, set)
			if stopped || !on || !st.Unwanted.IsZero() && now.Sub(st.Unwanted) > StandbyLinger {
				m.become(set, Away, None)
				st.Unwanted = time.Time{}
				m.ready.Drop = append(m.ready.Drop, Drop{Set: set, Role: Standby, Failed: stopped, Why: "no longer this gateway's to follow"})
			}
		}
	}
	if starting || moving {
		return
	}
	for _, set := range want {
		if st := &m.sets[set]; st.Role == Away && now.Sub(st.Wanted) >= StandbySettle {
			m.become(set, Standby, Starting)
			m.ready.Follow = append(m.ready.Follow, set)
			return
		}
	}
}

// rebalance hands one SET to a gateway that runs fewer than its share, at
// most every -rebalance: a gateway that joins takes its share from the
// others this way.
func (m *Machine) rebalance(now time.Time, owner, takers []int) {
	if m.cfg.Rebalance < 0 || m.leaving || now.Sub(m.lastMove) < m.cfg.Rebalance {
		return
	}
	set, to, ok := NextMove(owner, takers, m.cfg.Node)
	if !ok || !m.sets[set].Tells() || m.sets[set].Role == MovingOut {
		return
	}
	m.lastMove = now
	m.ready.Move = append(m.ready.Move, Move{Set: set, To: to})
}

// moveOut starts a move out, or refuses it.
func (m *Machine) moveOut(ev MoveOut) error {
	for _, st := range m.sets {
		if st.Role == MovingOut {
			return ErrMoveBusy
		}
	}
	st := &m.sets[ev.Set]
	switch {
	case !st.Tells():
		return fmt.Errorf("SET %d: %w", ev.Set, ErrNotHere)
	case ev.To < 0:
		return fmt.Errorf("%q: %w", ev.ToName, ErrNoGateway)
	case ev.To == m.cfg.Node:
		return fmt.Errorf("SET %d on %s: %w", ev.Set, ev.ToName, ErrThere)
	case !ev.Taker:
		return fmt.Errorf("gateway %s: %w (leaving, or not ready)", ev.ToName, ErrNotTaker)
	}
	m.moves++
	st.Role, st.Phase, st.Since, st.Peer, st.PeerName, st.Cut, st.Move = MovingOut, Preparing, ev.Now, ev.To, ev.ToName, false, m.moves
	return nil
}

// prepareIn starts a move in, or refuses it.
func (m *Machine) prepareIn(ev PrepareIn) error {
	st := &m.sets[ev.Set]
	switch {
	case st.Tells():
		return fmt.Errorf("SET %d runs here already", ev.Set)
	case ev.Owner != ev.From:
		return fmt.Errorf("SET %d's record names gateway %d, not the source %d: %w", ev.Set, ev.Owner, ev.From, ErrNotSource)
	case st.Role == MovingIn || st.Role == Taking:
		return fmt.Errorf("SET %d is being taken over here already", ev.Set)
	}
	// A standby of it becomes the move's follow.
	st.Role, st.Phase, st.Since, st.Peer, st.PeerName, st.CaughtUp = MovingIn, Following, ev.Now, ev.From, "", false
	return nil
}

// SET returns set's state.
func (m *Machine) SET(set int) SET { return m.sets[set] }

// Sets returns every SET's state, in SET order.
func (m *Machine) Sets() []SET { return slices.Clone(m.sets) }

// Tells reports whether this gateway tells set's money: the SET's state
// says so, and the gateway has lost none (a loss stops it).
func (m *Machine) Tells(set int) bool { return m.lost == nil && m.sets[set].Tells() }

// Telling returns the SETs whose money this gateway tells.
func (m *Machine) Telling() []int {
	var out []int
	for set, st := range m.sets {
		if st.Tells() {
			out = append(out, set)
		}
	}
	return out
}

// Count returns how many SETs have role.
func (m *Machine) Count(role Role) int {
	n := 0
	for _, st := range m.sets {
		if st.Role == role {
			n++
		}
	}
	return n
}

// Leaving reports whether this gateway hands its SETs over to leave.
func (m *Machine) Leaving() bool { return m.leaving }

// Lost is why this gateway stops, nil while it does not.
func (m *Machine) Lost() *Loss { return m.lost }
