package replicated

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/placement"
)

// A gateway of replicated SETs (-journal jetstream) is current while it
// can show that NATS carries for it: it hears its own heartbeat back, on
// the connection it sends them on and on its journal's connection, which
// makes its claims. Only a current gateway claims: it never takes a SET
// because it hears nobody. One that hears itself on neither for a lease is
// cut off: the others, which hear it no more, may claim its SETs. It fences
// itself (event.Bus.SetFenced): every request for its SETs is answered
// ERROR 9 (moved: its client reconnects to any gateway, which sends it to
// the SET's owner), every LOGIN LOGIN_ACK 3 with no address, /healthz 503.
// Clients that ask for nothing keep their connections: a NATS outage that
// no other gateway could serve through either drops no idle connection.
// Current again, it checks each SET it runs against its claims: still its
// own, it serves on; taken, it stops (ExitLost).
//
// A journal round is never given up on while the gateway runs
// (jsjournal.Options.Hold): its fate is read once JetStream answers, and a
// claim another gateway made meanwhile fences it then. While a round waits
// longer than a lease — JetStream without a quorum, a stream's leader
// elected — the SETs are stalled (event.Bus.SetStalled): money requests are
// answered "overloaded" (retry) at the door, the rest is served. No
// connection is dropped for an outage whose end leaves every SET with its
// owner. (docs/CLUSTER.md, Failover)

// Fenced reports whether this gateway fenced its SETs; false for a server
// without replicated SETs.
func (r *SETs) Fenced() bool { return r != nil && r.fenced.Load() }

// fenceAfter is how long a gateway may hear itself nowhere before it
// fences itself: the lease, after which the others, which hear it no more,
// may claim its SETs; three heartbeats at least. Its heartbeats late under
// load fence nothing: they come back late, not never.
func (r *SETs) fenceAfter() time.Duration {
	return max(r.cfg.Lease, 3*cluster.BeatEvery)
}

// currentWithin is how recently a gateway must have heard itself, on both
// of its connections, to claim: half the lease.
func (r *SETs) currentWithin() time.Duration {
	return max(r.cfg.Lease/2, 3*cluster.BeatEvery)
}

// hearOnJournal subscribes, on the journal's connection, to every
// gateway's heartbeat: what this gateway hears there is what its claims
// may go by.
func (r *SETs) hearOnJournal() error {
	r.jsHeard = make([]atomic.Int64, r.cfg.Nodes)
	r.ignored.Store(-1)
	prefix := jsPrefix + ".gw."
	sub, err := r.nc.Subscribe(prefix+"*.beat", func(m *nats.Msg) {
		tok, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, prefix), ".")
		node, err := strconv.Atoi(tok)
		if err != nil || node < 0 || node >= r.cfg.Nodes || strconv.Itoa(node) != tok {
			return // the core connection's receiver counts forgeries
		}
		var g struct {
			Node int `json:"node"`
		}
		if json.Unmarshal(m.Data, &g) != nil || g.Node != node || r.ignored.Load() == int32(node) {
			return
		}
		r.jsHeard[node].Store(time.Now().UnixNano())
	})
	if err != nil {
		return fmt.Errorf("hearing the heartbeats on the journal's connection: %w", err)
	}
	r.beatSub = sub
	return nil
}

// heardOnJournal reports whether node's heartbeat came on the journal's
// connection within d.
func (r *SETs) heardOnJournal(node int, d time.Duration) bool {
	at := r.jsHeard[node].Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// notCurrent says why this gateway cannot show that NATS carries for it,
// on both of its connections, within d; "" if it can.
func (r *SETs) notCurrent(d time.Duration) string {
	switch {
	case !r.host.Node().HearsItself(d):
		return "its own heartbeat does not come back on its NATS connection"
	case !r.heardOnJournal(r.cfg.Node, d):
		return "its own heartbeat does not reach its journal's connection"
	}
	return ""
}

// cutOff says why this gateway hears itself on neither connection within
// d, "" if it hears itself on one.
func (r *SETs) cutOff(d time.Duration) string {
	if r.host.Node().HearsItself(d) || r.heardOnJournal(r.cfg.Node, d) {
		return ""
	}
	return fmt.Sprintf("its own heartbeat came back on neither of its NATS connections for %v", d)
}

// live is the gateways heard within the lease on either connection, this
// one included: a gateway heard on one is alive, and its SETs are not
// claimed.
func (r *SETs) live() []int {
	live := r.host.Node().Heard()
	for node := range r.cfg.Nodes {
		if !slices.Contains(live, node) && r.heardOnJournal(node, r.cfg.Lease) {
			live = append(live, node)
		}
	}
	slices.Sort(live)
	return live
}

// watch fences this gateway once it has not been current for fenceAfter,
// and lifts the fence once it is again and its SETs are still its own;
// every heartbeat, until stop or the gateway lost a SET.
func (r *SETs) watch() {
	defer close(r.watchDone)
	t := time.NewTicker(cluster.BeatEvery)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case <-r.lost:
			return
		case <-t.C:
		}
		d := r.fenceAfter()
		why := ""
		if time.Since(start) > d { // its first heartbeats heard back, first
			why = r.cutOff(d)
		}
		switch {
		case why == "" && r.fenced.Load():
			r.unfence()
		case why != "" && !r.fenced.Load():
			r.fence(why)
		}
		stalled := r.store.Stalled() > r.cfg.Lease
		if stalled != r.host.Bus().Stalled() {
			r.host.Bus().SetStalled(stalled)
			if stalled {
				r.stalls.Add(1)
				r.cfg.Log.Warn("JetStream stalled: a journal round has waited longer than the lease; money requests are answered \"overloaded\" (retry) until it is acknowledged",
					"waited", r.store.Stalled().Round(time.Millisecond))
			} else {
				r.cfg.Log.Info("JetStream answers again: money requests served")
			}
		}
	}
}

// fence stops this gateway from serving its SETs until it is current again.
func (r *SETs) fence(why string) {
	r.fenced.Store(true)
	r.host.Bus().SetFenced(true)
	r.fences.Add(1)
	r.cfg.Log.Warn("cut off from NATS: this gateway may have lost its SETs to the others; it serves none of them until it can show they are still its own: requests answered ERROR 9 (moved), logins LOGIN_ACK 3, /healthz 503, no claims",
		"why", why, "sets", r.Running())
}

// unfence lifts the fence once every SET run here is still its own by its
// claims, read afresh; a SET another gateway claimed meanwhile stops this
// gateway (lose). Not lifted while JetStream cannot say.
func (r *SETs) unfence() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for set, st := range r.Telling() {
		c, err := r.owners.Current(ctx, set)
		if err != nil {
			return // JetStream not back yet: the next heartbeat tries again
		}
		if c.Node != r.cfg.Node || c.Epoch != st.Epoch {
			r.step(placement.Refused{Set: set, Why: fmt.Sprintf("while this gateway was cut off from NATS, gateway %d (%s) claimed it at epoch %d", c.Node, c.Name, c.Epoch)})
			return
		}
	}
	r.fenced.Store(false)
	r.host.Bus().SetFenced(false)
	r.cfg.Log.Info("NATS back: this gateway's SETs are still its own; serving them again", "sets", r.Running())
}
