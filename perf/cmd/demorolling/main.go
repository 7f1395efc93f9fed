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
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// config is one run.
type config struct {
	sets, replicas int
	users, qps     int
	lease          time.Duration
	rebalance      time.Duration // the gateways' -rebalance
	ramp, lead     time.Duration // users in; load before the first step
	slot           time.Duration // from one step's start to the next's
	sendRate       float64
	camps          harness.Campaigns
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
	fs.IntVar(&c.sets, "sets", 12, "-sets of every gateway (`N`)")
	fs.IntVar(&c.replicas, "replicas", 3, "the gateways' -replicas: JetStream's copies of the journal, snapshots and ownership records")
	fs.IntVar(&c.users, "users", 3000, "users 1..`N` of the load client, each its own connection")
	fs.IntVar(&c.qps, "qps", 3000, "the load client's SHAKEs a second (`rate`)")
	dur := func(name string, p *time.Duration, def time.Duration, usage string) {
		*p = def
		fs.Func(name, usage+" (a Go duration or whole seconds; default "+def.String()+")", func(s string) (err error) {
			*p, err = harness.ParseDuration(s)
			return err
		})
	}
	dur("lease", &c.lease, 1500*time.Millisecond, "the gateways' -lease, `d`")
	dur("rebalance", &c.rebalance, 300*time.Millisecond, "the gateways' -rebalance, `d`: how fast a gateway started again takes its share back")
	dur("ramp", &c.ramp, 5*time.Second, "time for the users to connect before the load, `d`")
	dur("lead", &c.lead, 10*time.Second, "load before the first step, `d`: the p99 each step is held against")
	dur("slot", &c.slot, 25*time.Second, "from a step's start to the next one's, `d`")
	fs.Float64Var(&c.sendRate, "send-rate", 100, "the load client's SENDs a second (`rate`), each to -recipients random users")
	c.camps.Add(fs, 0, "send-campaign-rate", 50)
	c.RunFlags.Add(fs, "demorolling", "demorolling-")
	harness.Usage(fs, `3 nats-server processes of -bin (JetStream, synced at every write), 3 gateways of bin/server
(-journal jetstream, -node I/4, -replicas, -lease, -rebalance), bin/loadclient with -server naming
the three (-reconcile strict), a shake campaign that fills the pools within the lead and a send
campaign, POSTed on gateway 2. Then, -slot apart: each gateway stopped with SIGTERM (it hands its
SETs to the others, then exits 0) and started again on its ports, taking its share back; a fourth
gateway joins and takes its share; gateway 0 leaves for good. Per step: each SET moved, its pause
(the old owner refusing to the new one serving) and the move's whole time; the SHAKE p99 of the
step's seconds against the lead's; SHAKEs answered "overloaded" (retry) and requests in flight at
ERROR 9 (not carried out); /cluster/stats money before and after. At the end the load client's
strict reconciliation and the cluster's ledger invariants. Bounded by ramp + lead + steps × slot
+ 4 minutes.

Exit status: 0 when everything passed, 1 when a request was lost, a fen missing or a gateway did
not stop cleanly, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.If(c.sets < nodes || c.sets > 4096, "-sets=%d: want %d..4096", c.sets, nodes)
	bad.If(c.replicas < 1 || c.replicas > gateways, "-replicas=%d: want 1..%d", c.replicas, gateways)
	bad.If(c.qps < 0, "-qps=%d: want 0 or more", c.qps)
	bad.If(c.lease < 500*time.Millisecond, "-lease=%v: want at least 500ms", c.lease)
	bad.If(c.ramp < time.Second || c.lead < 2*time.Second, "-ramp=%v, -lead=%v: want at least 1s and 2s", c.ramp, c.lead)
	bad.If(c.slot < 10*time.Second, "-slot=%v: want at least 10s (a stop, a start and a share taken back)", c.slot)
	bad.If(c.sendRate < 0, "-send-rate=%v: want 0 or more", c.sendRate)
	bad.If(c.camps.Shake < 0 || c.camps.Send < 1, "-shake-rate=%d, -send-campaign-rate=%d: want 0 (sized to the load) or more, and at least 1", c.camps.Shake, c.camps.Send)
	bad.Add(c.RunFlags.Validate(c.users, c.camps.Recipients))
	return c, bad.Err()
}

// load is the load's length after the ramp: the lead, the steps' slots and
// a tail.
func (c config) load() time.Duration {
	return c.lead + time.Duration(len(steps))*c.slot + 5*time.Second
}

func main() {
	bound := func(c config) time.Duration { return c.ramp + c.load() + 4*time.Minute }
	harness.Main("demorolling", parseFlags, bound, func(ctx context.Context, c config) error {
		fmt.Printf("demorolling %s\n", strings.Join(os.Args[1:], " "))
		return run(ctx, c, "demorolling "+strings.Join(os.Args[1:], " "))
	})
}
