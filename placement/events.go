package placement

import (
	"fmt"
	"time"
)

// What the machine is stepped with (Event) and what it answers (Ready):
// the transitions themselves are in machine.go.

// Ready is what the driver carries out after a Step, in this order.
type Ready struct {
	// Lost: this gateway lost a SET it held; it stops (exit status 3) and
	// carries out nothing else.
	Lost *Loss
	// Take: claim each, fencing its owner, load it and serve it.
	Take []int
	// Renew: renew the SET's state object before it loads.
	Renew []int
	// Drop: stop following these SETs.
	Drop []Drop
	// Follow: start a standby of each SET.
	Follow []int
	// Move: hand the SET to the gateway (rebalancing).
	Move []Move
	// Route: point the bus at a SET's new owner.
	Route []Route
}

// Loss is why this gateway stops: a SET it held is another's.
type Loss struct {
	Set int
	Why string
}

func (l *Loss) String() string { return fmt.Sprintf("SET %d: %s", l.Set, l.Why) }

// Drop is a follow to stop.
type Drop struct {
	Set    int
	Role   Role // Standby or MovingIn
	Failed bool // a standby whose follow stopped on its own
	Why    string
}

// Move is a SET to hand to another gateway.
type Move struct{ Set, To int }

// Route is a SET's owner to route its events to (-1: nowhere).
type Route struct{ Set, Node int }

// Event is what happened, for Step.
type Event interface{ event() }

// Start: the claims start at Now; they wait JoinWait to hear the others.
type Start struct{ Now time.Time }

// Tick is the heartbeat of the claims: the view of the moment.
type Tick struct {
	Now time.Time
	// Current: this gateway shows that NATS carries for it (it hears its
	// own heartbeat on both connections, and is not fenced).
	Current bool
	Owner   []Owner // each SET's last claim
	Live    []int   // the gateways heard within the lease, on either connection
	Heard   []int   // those heard on the core connection
	Takers  []int   // the live gateways that take SETs
	// Stopped: the standbys whose follow stopped on its own (an error).
	Stopped []int
}

// ClaimHeard: a SET's last claim changed.
type ClaimHeard struct {
	Set int
	Now Owner
}

// Claimed: this gateway's claim of Set was appended.
type Claimed struct {
	Set        int
	Epoch, Seq uint64
	Name       string
}

// Served: Set, loaded, runs here.
type Served struct{ Set int }

// Failed: a take or a switch of Set failed after its claim: the claim names
// this gateway, which cannot serve the SET.
type Failed struct {
	Set int
	Why string
}

// Refused: a journal round of Set was fenced or failed, or its claims read
// afresh are another's: a loss if this gateway tells its money.
type Refused struct {
	Set int
	Why string
}

// Blank: Set's state object is about to load.
type Blank struct{ Set int }

// StandbyStarted: a standby's start ended; Err if it failed.
type StandbyStarted struct {
	Set int
	Err error
}

// MoveOut asks to hand Set to gateway To (-1: no gateway of that name is
// up) named ToName; Taker says whether To takes SETs.
type MoveOut struct {
	Set, To int
	ToName  string
	Taker   bool
	Now     time.Time
}

// MovePhase: the move out Move of Set reached Phase (Cutting, Switching).
type MovePhase struct {
	Set   int
	Move  uint64
	Phase Phase
}

// Cut: the move out Move stopped Set here; its money is told here no more.
type Cut struct {
	Set  int
	Move uint64
}

// MoveEnded: the move out Move of Set ended, done or not. A move's events
// name it (SET.Move), for a move that waited on its target while the SET
// was taken back and moved again must not end the next one.
type MoveEnded struct {
	Set  int
	Move uint64
}

// PrepareIn: gateway From asks this one to follow Set, which From runs
// (by Owner, its last claim), to take it over.
type PrepareIn struct {
	Set, From, Owner int
	Now              time.Time
}

// CaughtUp: a move in of Set has caught up with its source.
type CaughtUp struct{ Set int }

// SwitchIn: the source From cut Set; this gateway takes it over.
type SwitchIn struct{ Set, From int }

// InEnded: a move in of Set ended: failed, or served.
type InEnded struct{ Set int }

// AbortIn: a move in of Set is given up (its source said so, or is gone).
type AbortIn struct {
	Set int
	Why string
}

// Release: at a graceful stop, Set is handed back; true in Released if it
// was told here.
type Release struct{ Set int }

// Leave: this gateway hands every SET over and takes none.
type Leave struct{}

// Rebalance sets -rebalance.
type Rebalance struct{ Every time.Duration }

func (Start) event()          {}
func (Tick) event()           {}
func (ClaimHeard) event()     {}
func (Claimed) event()        {}
func (Served) event()         {}
func (Failed) event()         {}
func (Refused) event()        {}
func (Blank) event()          {}
func (StandbyStarted) event() {}
func (MoveOut) event()        {}
func (MovePhase) event()      {}
func (Cut) event()            {}
func (MoveEnded) event()      {}
func (PrepareIn) event()      {}
func (CaughtUp) event()       {}
func (SwitchIn) event()       {}
func (InEnded) event()        {}
func (AbortIn) event()        {}
func (Release) event()        {}
func (Leave) event()          {}
func (Rebalance) event()      {}
