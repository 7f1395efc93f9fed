package placement

import (
	"fmt"
	"time"
)

// Role is what this gateway does with a SET.
type Role uint8

const (
	// Away: nothing of the SET runs or is followed here; another gateway
	// runs it, or nobody does yet.
	Away Role = iota
	// Standby: followed here as its owner appends, to be taken over at once
	// should the owner die (Standbys).
	Standby
	// Taking: claimed here (the claim appended, the old owner fenced) and
	// being loaded: from the standby, or from the snapshot and the records.
	Taking
	// Serving: claimed, loaded and running here; its money is told here.
	Serving
	// MovingOut: handed by this gateway, its source, to another, its
	// target: served here until the cut.
	MovingOut
	// MovingIn: followed here to be taken over from its source by a move.
	MovingIn
)

var roleNames = [...]string{Away: "away", Standby: "standby", Taking: "taking", Serving: "serving", MovingOut: "moving_out", MovingIn: "moving_in"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", r)
}

// Phase is where a SET is within its role: a standby's start, a take's
// load, a move's step.
type Phase uint8

const (
	// None: the role has no phases (Away, Serving).
	None Phase = iota
	// Starting: a standby loading the SET's snapshot.
	Starting
	// Following: a standby, or a move's target, applying the SET's records
	// as they are appended.
	Following
	// Loading: a take reading the SET up to its claim.
	Loading
	// Preparing: a move's source waits for its target to catch up, serving.
	Preparing
	// Cutting: a move's source stops the SET and makes its last round
	// durable.
	Cutting
	// Switching: a move's target reads up to the source's last message and
	// claims the SET after it; the source waits for it.
	Switching
)

var phaseNames = [...]string{None: "", Starting: "starting", Following: "following", Loading: "loading", Preparing: "preparing", Cutting: "cutting", Switching: "switching"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// Owner is a SET's last claim as this gateway heard it: the gateway that
// owns it (-1 none) and the claim's epoch.
type Owner struct {
	Node  int
	Name  string
	Epoch uint64
}

// SET is one SET's state on this gateway: a value, read whole (Machine.SET).
type SET struct {
	Role  Role
	Phase Phase
	// Owner is the SET's last claim heard.
	Owner Owner
	// Epoch and ClaimSeq are this gateway's own last claim of the SET
	// (Taking, Serving, MovingOut, a MovingIn that claimed): its appends are
	// fenced against the epoch, its snapshots name the sequence.
	Epoch    uint64
	ClaimSeq uint64
	// Cut: a move out stopped the SET here; its money is told here no more.
	Cut bool
	// CaughtUp: a move in's follow has read every message of its source
	// appended before the prepare; only then may it switch.
	CaughtUp bool
	// Peer is the other gateway of a move: the target of a move out, the
	// source of a move in; PeerName the target's name.
	Peer     int
	PeerName string
	// Move numbers the move out under way (MovingOut): its events name it.
	Move uint64
	// Since is when the role or the phase began.
	Since time.Time
	// Used: the SET's state object ran, loaded or followed here; it is
	// renewed before it loads again.
	Used bool
	// Wanted is since when Standbys gives the SET to this gateway (zero:
	// it does not); Unwanted since when a standby of it no longer is.
	Wanted, Unwanted time.Time
}

// Tells reports whether this gateway tells the SET's money: it runs the SET,
// up to a move's cut.
func (s SET) Tells() bool {
	return s.Role == Serving || s.Role == MovingOut && !s.Cut
}

func (s SET) String() string {
	out := s.Role.String()
	if s.Phase != None {
		out += "/" + s.Phase.String()
	}
	return out
}
