// Command demorolling is `make demo-rolling`: a rolling upgrade of a
// cluster whose SETs move online (-journal jetstream), under load with
// campaigns. Each gateway in turn is stopped with SIGTERM — it hands every
// SET it runs to the others first — and started again (the same binary
// stands in for the new one), and takes its share back; then a fourth
// gateway joins and one leaves. For every step it reports the moves and
// their pauses, the SHAKE p99 of the step against the lead's, the requests
// refused ("retry") and left unanswered by ERROR 9, and the money counted
// before and after; at the end the load client's strict reconciliation
// with /cluster/stats and the cluster's ledger. Any request lost or fen
// missing fails it. perf/README.md has the steps; -help lists the flags.
package main

import (
	"flag"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// config is one run.
type config struct {
	harness.StepLoad
	rebalance time.Duration // the gateways' -rebalance
	harness.RunFlags
}

// gateways is the cluster's size at the start; the fourth joins later.
const (
	gateways = 3
	nodes    = gateways + 1
)

// steps are the run's steps in order: each gateway drained and started
// again, then a fourth joining, then the first leaving for good.
var steps = []struct {
	kind string // restart, join, leave
	node int
}{{"restart", 0}, {"restart", 1}, {"restart", 2}, {"join", 3}, {"leave", 0}}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	c.StepLoad.Add(fs, "step", 25*time.Second)
	harness.DurationVar(fs, &c.rebalance, "rebalance", 300*time.Millisecond, "the gateways' -rebalance, `d`: how fast a gateway started again takes its share back")
	c.RunFlags.Add(fs, "demorolling", "demorolling-")
	harness.Usage(fs, `3 nats-server processes of -bin (JetStream, synced at every write), 3 gateways of bin/server
(-journal jetstream, -node I/4, -replicas, -lease, -rebalance), bin/loadclient with -server naming
the three (-reconcile strict), a shake campaign that fills the pools within the lead and a send
campaign, POSTed on gateway 2. Then, -slot apart: each gateway stopped with SIGTERM (it hands its
SETs to the others, then exits 0) and started again on its ports, taking its share back; a fourth
gateway joins and takes its share; gateway 0 leaves for good. Per step: each SET moved, its pause
(the old owner refusing to the new one serving) and the move's whole time; the SHAKE p99 of the
step's seconds against the lead's; SHAKEs answered "overloaded" (retry) and requests in flight at
ERROR 9 (not carried out; OPENs among them sent again, for they may have drawn a share);
/cluster/stats money before and after. At the end the load client's strict reconciliation and
the cluster's ledger invariants. Bounded by ramp + lead + steps × slot
+ 4 minutes.

Exit status: 0 when everything passed, 1 when a SHAKE, SEND or CHAT was lost, an OPEN left
without its answer, a fen missing or a gateway did not stop cleanly, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	c.StepLoad.Validate(&bad, gateways, nodes, 2*time.Second)
	bad.If(c.Slot < 10*time.Second, "-slot=%v: want at least 10s (a stop, a start and a share taken back)", c.Slot)
	bad.Add(c.RunFlags.Validate(c.Users, c.Camps.Recipients))
	return c, bad.Err()
}

// load is the load's length after the ramp: the lead, the steps' slots and
// a tail.
func (c config) load() time.Duration {
	return c.Lead + time.Duration(len(steps))*c.Slot + 5*time.Second
}

func main() {
	steprun.Main("demorolling", parseFlags, func(c config) time.Duration { return c.Ramp + c.load() }, run)
}
