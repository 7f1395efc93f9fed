// Command demofailover is `make demo-failover`: gateways whose SETs fail
// over (-journal jetstream) under load, broken on purpose (a gateway
// killed, one stopped past its lease, a NATS server killed) and restarted
// as a supervisor would. Per fault: how long each moved SET went without a
// money answer, and no money told before it missing after; at the end,
// money told == counted, the load client's reconciliation, the cluster's
// ledger, and no fenced gateway's answer in JetStream. -help lists the flags.
package main

import (
	"flag"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// config is one run; the flags say what each field is.
type config struct {
	harness.StepLoad
	standby, stop, nats                   bool
	kills                                 int
	stopFor, natsDown, window, probeEvery time.Duration
	harness.RunFlags
}

// gateways is the cluster's size, and of NATS servers: 3, the smallest
// quorum that outlives one of them.
const gateways = 3

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	c.StepLoad.Add(fs, "fault", 20*time.Second)
	fs.BoolVar(&c.standby, "standby", true, "the gateways' -standby: each follows the SETs it would take over; false: a takeover loads them from JetStream")
	fs.IntVar(&c.kills, "kills", 2, "kill -9 faults (`N`): the first comes before the SIGSTOP and NATS faults, the others after them")
	fs.BoolVar(&c.stop, "stop", true, "the SIGSTOP fault: a gateway stopped past its lease, then continued: it must exit 3")
	fs.BoolVar(&c.nats, "nats", true, "the NATS fault: the journal stream's leader of the 3 NATS servers killed, restarted -nats-down later")
	harness.DurationVar(fs, &c.stopFor, "stop-for", 0, "SIGSTOP to SIGCONT, `d` (0: -lease + 2s)")
	harness.DurationVar(fs, &c.natsDown, "nats-down", 10*time.Second, "how long the NATS server stays down, `d`")
	harness.DurationVar(fs, &c.window, "window", 15*time.Second, "the longest a moved SET may go without a money answer after its fault, `d`")
	harness.DurationVar(fs, &c.probeEvery, "probe-every", 10*time.Millisecond, "each probe's SHAKE period during a fault, `d`")
	c.RunFlags.Add(fs, "demofailover", "demofailover-")
	harness.Usage(fs, `3 nats-server processes of -bin (JetStream, synced at every write), 3 gateways of bin/server (-journal jetstream,
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
func (c config) faults() int { return len(c.plan()) }

// load is the load's length after the ramp: the lead, the faults' slots,
// and a tail.
func (c config) load() time.Duration {
	return c.Lead + time.Duration(c.faults())*c.Slot + 5*time.Second
}

func main() {
	steprun.Main("demofailover", parseFlags, func(c config) time.Duration { return c.Ramp + c.load() }, run)
}
