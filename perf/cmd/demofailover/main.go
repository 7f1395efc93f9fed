// Command demofailover is `make demo-failover`: gateways whose SETs fail
// over (-journal jetstream) under load, broken on purpose — a gateway
// killed with SIGKILL, one stopped past its lease (SIGSTOP, then SIGCONT:
// it must exit 3), a NATS server of the three killed — each restarted as a
// supervisor would. For every fault it measures with probe connections how
// long each moved SET went without a money answer, and checks that no
// money told before the fault is missing after it; at the end, the money
// the load client and the probes were told equal to the money counted
// (every request a fault left unanswered sent again with its request id),
// the load client's reconciliation with /cluster/stats, the cluster's ledger, and
// in JetStream that no fenced gateway's answer was ever appended after a
// claim. perf/README.md has the steps; -help lists the flags.
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
	harness.StepLoad
	standby    bool          // the gateways' -standby
	kills      int           // kill -9 faults: the first before the others, the rest after
	stop       bool          // the SIGSTOP fault
	nats       bool          // the NATS fault
	stopFor    time.Duration // SIGSTOP to SIGCONT
	natsDown   time.Duration // NATS server killed to restarted
	window     time.Duration // the longest a measured SET may go without money
	probeEvery time.Duration
	harness.RunFlags
}

// gateways is the cluster's size, and of NATS servers: 3, the smallest
// quorum that outlives one of them.
const gateways = 3

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	c.StepLoad.Add(fs, "fault", 20*time.Second)
	fs.BoolVar(&c.standby, "standby", true, "the gateways' -standby: each follows the SETs it would take over; false: a takeover loads them from JetStream")
	dur := func(name string, p *time.Duration, def time.Duration, usage string) {
		harness.DurationVar(fs, p, name, def, usage)
	}
	fs.IntVar(&c.kills, "kills", 2, "kill -9 faults (`N`): the first comes before the SIGSTOP and NATS faults, the others after them")
	fs.BoolVar(&c.stop, "stop", true, "the SIGSTOP fault: a gateway stopped past its lease, then continued: it must exit 3")
	fs.BoolVar(&c.nats, "nats", true, "the NATS fault: the journal stream's leader of the 3 NATS servers killed, restarted -nats-down later")
	dur("stop-for", &c.stopFor, 0, "SIGSTOP to SIGCONT, `d` (0: -lease + 2s)")
	dur("nats-down", &c.natsDown, 10*time.Second, "how long the NATS server stays down, `d`")
	dur("window", &c.window, 15*time.Second, "the longest a moved SET may go without a money answer after its fault, `d`")
	dur("probe-every", &c.probeEvery, 10*time.Millisecond, "each probe's SHAKE period during a fault, `d`")
	c.RunFlags.Add(fs, "demofailover", "demofailover-")
	harness.Usage(fs, `NATS inside this process (3 servers, JetStream), 3 gateways of bin/server (-journal jetstream,
-replicas, -lease, -sets), bin/loadclient with -server and -admin naming every gateway (-reconcile
at-least), a shake and a send campaign POSTed on gateway 2 (-shake-rate 0: the shake campaign
deals 2 envelopes per SHAKE of the run within the lead, for a campaign's part ends with its
gateway and the SETs it ran keep only what it dealt them). Then, -slot apart: kill -9 of the
gateway running the most SETs, restarted once they answer elsewhere; SIGSTOP of another past its
lease, SIGCONT, exit 3 expected, restarted; the journal stream's leader of the NATS servers killed
and restarted -nats-down later; the other -kills. A probe user per SET SHAKEs every -probe-every
through each fault: the time from the fault to each moved SET's first money answer. Money of
/cluster/stats before a fault ≤ after it; at the end the load client's reconciliation, the
cluster's ledger invariants, and every SET's journal replayed: no message after a claim from
anyone but the claimant. Bounded by ramp + lead + faults × slot + 4 minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	if c.stopFor == 0 {
		c.stopFor = c.Lease + 2*time.Second
	}
	var bad harness.Problems
	c.StepLoad.Validate(&bad, gateways, gateways, time.Second)
	bad.If(c.kills < 0 || c.kills > 20, "-kills=%d: want 0..20", c.kills)
	bad.If(c.faults() == 0, "no fault: want -kills above 0, -stop or -nats")
	bad.If(c.stopFor <= c.Lease, "-stop-for=%v: want more than -lease", c.stopFor)
	bad.If(c.natsDown < time.Second, "-nats-down=%v: want at least 1s", c.natsDown)
	bad.If(c.window < time.Second, "-window=%v: want at least 1s", c.window)
	bad.If(c.Slot < c.window/2 || c.nats && c.Slot < c.natsDown+5*time.Second, "-slot=%v: want at least half -window, and -nats-down + 5s with -nats", c.Slot)
	bad.If(c.probeEvery < time.Millisecond, "-probe-every=%v: want at least 1ms", c.probeEvery)
	bad.Add(c.RunFlags.Validate(c.Users, c.Camps.Recipients))
	return c, bad.Err()
}

// faults is how many faults the run has.
func (c config) faults() int { return c.kills + b2i(c.stop) + b2i(c.nats) }

// load is the load's length after the ramp: the lead, the faults' slots,
// and a tail.
func (c config) load() time.Duration {
	return c.Lead + time.Duration(c.faults())*c.Slot + 5*time.Second
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func main() {
	bound := func(c config) time.Duration { return c.Ramp + c.load() + 4*time.Minute }
	harness.Main("demofailover", parseFlags, bound, func(ctx context.Context, c config) error {
		fmt.Printf("demofailover %s\n", strings.Join(os.Args[1:], " "))
		return run(ctx, c, "demofailover "+strings.Join(os.Args[1:], " "))
	})
}
