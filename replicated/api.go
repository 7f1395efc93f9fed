package replicated

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/placement"
)

// What the server asks of its replicated SETs.

// Run starts the claims and the watch on this gateway's liveness, once the
// server serves.
func (r *SETs) Run() {
	r.claiming.Store(true)
	go r.claims()
	go r.watch()
}

// Lost is closed once this gateway lost a SET it ran: it must stop.
func (r *SETs) Lost() <-chan struct{} { return r.lost }

// Node and Name are this gateway's node number and name.
func (r *SETs) Node() int    { return r.cfg.Node }
func (r *SETs) Name() string { return r.cfg.Name }

// Tells reports whether this gateway tells set's money now.
func (r *SETs) Tells(set int) bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.pm.Tells(set)
}

// OwnerOf is the gateway of set's last claim, -1 none; FormerOf the one
// before it.
func (r *SETs) OwnerOf(set int) int  { return r.owners.Of(set) }
func (r *SETs) FormerOf(set int) int { return r.owners.Former(set) }

// Stalled is how long the oldest journal round has waited for JetStream.
func (r *SETs) Stalled() time.Duration { return r.store.Stalled() }

// Connected reports whether the journal's NATS connection is up.
func (r *SETs) Connected() bool { return r.nc.IsConnected() }

// StopStore gives up the journal rounds still waiting for JetStream: at a
// stop of a gateway cut off or stalled, which cannot wait for them.
func (r *SETs) StopStore() { r.store.Stop() }

// PutSnapshot puts snap of set into this gateway's snapshot bucket.
func (r *SETs) PutSnapshot(ctx context.Context, set int, snap jsjournal.Snapshot) error {
	return r.store.PutSnapshot(ctx, set, snap)
}

// SnapNow asks for a snapshot now: a takeover replayed a long tail, which
// the SET's next owner must not replay again.
func (r *SETs) SnapNow() <-chan struct{} { return r.snapNow }

// HandOut hands out, one at a time, every SET beyond this gateway's share
// to the gateways that run fewer than theirs: the moves made, and the
// first error once a move failed twice in a row.
func (r *SETs) HandOut(ctx context.Context) ([]MoveResult, error) { return r.handOut(ctx, false) }

// Counters are what the replicated SETs count, for /metrics.
type Counters struct {
	Running, MovesOut, MovesIn, Standbys int
	Leaving, Lost, Fenced                bool

	Takeovers, ClaimsLost, ClaimsDeferred, ClaimFailures, Released uint64
	Moves, MoveFailures, StandbyTakeovers, StandbyFailures         uint64
	Fences, Stalls                                                 uint64
	// LastTakeover is the last takeover's claim to serving; LastMovePause
	// the last move out's pause.
	LastTakeover, LastMovePause time.Duration
	// Refused is what was read from JetStream and refused, by
	// jsjournal.RefusedNames' kind.
	Refused []uint64
}

// Counters returns the counters of the moment.
func (r *SETs) Counters() Counters {
	r.pmu.Lock()
	c := Counters{Running: len(r.pm.Telling()), MovesOut: r.pm.Count(placement.MovingOut), MovesIn: r.pm.Count(placement.MovingIn),
		Standbys: r.pm.Count(placement.Standby), Leaving: r.pm.Leaving()}
	r.pmu.Unlock()
	c.Lost, c.Fenced = r.LostReason() != "", r.fenced.Load()
	c.Takeovers, c.ClaimsLost, c.ClaimsDeferred, c.ClaimFailures, c.Released = r.takeovers.Load(), r.claimsLost.Load(), r.deferred.Load(), r.takeFailures.Load(), r.released.Load()
	c.Moves, c.MoveFailures, c.StandbyTakeovers, c.StandbyFailures = r.moves.Load(), r.moveFailures.Load(), r.standbyTakes.Load(), r.standbyDrops.Load()
	c.Fences, c.Stalls = r.fences.Load(), r.stalls.Load()
	c.LastTakeover, c.LastMovePause = time.Duration(r.takeoverNs.Load()), time.Duration(r.movePauseNs.Load())
	for k := range jsjournal.RefusedNames {
		c.Refused = append(c.Refused, r.store.Refused(k))
	}
	return c
}

// For tests.

// SetRebalance sets -rebalance of a running gateway.
func (r *SETs) SetRebalance(d time.Duration) { r.step(placement.Rebalance{Every: d}) }

// IgnoreHeartbeatsOf makes this gateway's journal connection deaf to
// node's heartbeats; -1 hears every gateway again.
func (r *SETs) IgnoreHeartbeatsOf(node int) { r.ignored.Store(int32(node)) }

// SetSwitchHook makes every gateway of the process run f at points of a
// move's switch on the target ("claimed": its claim appended, the SET not
// served yet); nil removes it.
func SetSwitchHook(f func(point string)) {
	if f == nil {
		testSwitchHook.Store(nil)
		return
	}
	testSwitchHook.Store(&f)
}

// Campaigns is where the cluster's campaign ops are kept: the gateway's
// journal connection, the journal's stream and its subjects' prefix
// (package campaign/parts, Registry).
func (r *SETs) Campaigns() (nc *nats.Conn, stream, prefix string) {
	return r.nc, jsjournal.Layout{Prefix: jsPrefix}.Stream(), jsPrefix
}
