// Command crash is `make crash`: the durability contract on the real
// binaries. Under one load client run and a probe of its own it kills the
// server with SIGKILL at -crashes random moments (-seed), restarts it on the
// same -data and ports, and checks per crash that the money the clients
// were told is counted, and at the end that it is exactly the money counted
// (what a kill left unanswered is sent again with its request id), that no
// envelope id or share is handed out twice and that every campaign ends at
// its total. -single kills once under a stopped load client; -scale
// recovers 10M pooled and 1M live group envelopes. -help lists the flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// config is one crash run; the flags say what each field is.
type config struct {
	users, qps, crashes, probes int
	sendRate                    float64
	killAfter, duration         time.Duration
	seed                        uint64
	single, scale               bool
	camps                       harness.Campaigns
	scalePool, scaleGroups      int
	scaleTimeout                time.Duration
	harness.RunFlags
}

// The crash run's target load, and the smaller one of -single.
const (
	defaultUsers       = 19000
	defaultQPS         = 30000
	defaultSingleUsers = 2000
	defaultSingleQPS   = 2000
)

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.users, "users", defaultUsers, "the load client's users 1..`N` (-single: 2,000 unless given)")
	fs.IntVar(&c.qps, "qps", defaultQPS, "the load client's SHAKEs a second (`rate`) (-single: 2,000 unless given)")
	fs.Float64Var(&c.sendRate, "send-rate", 50, "the load client's SENDs a second (`rate`); it OPENs every envelope it is pushed")
	fs.IntVar(&c.crashes, "crashes", 5, "SIGKILLs of the server under one load client run, each followed by a restart on the same -data and ports")
	fs.DurationVar(&c.duration, "duration", 90*time.Second, "the load client's run; the crashes fall at random moments within it, spaced so that each restart has load after it")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the crash moments: the same seed, the same moments")
	fs.BoolVar(&c.single, "single", false, "instead: one SIGKILL after -kill-after, the load client stopped at it, a restart on new ports (2,000 users, 2,000 SHAKE/s unless -users, -qps)")
	fs.DurationVar(&c.killAfter, "kill-after", 10*time.Second, "-single: SIGKILL the server this long after the campaigns start")
	c.camps.Add(fs, 2000, "send-campaign-rate", 200)
	fs.IntVar(&c.probes, "probes", 8, "probe users (after the load client's) that record the envelope ids they get, before the kill and after the restart")
	fs.BoolVar(&c.scale, "scale", false, "instead: build -scale-pool waiting shake envelopes and -scale-groups live group envelopes, kill -9, restart, report the recovery's time and RSS")
	fs.IntVar(&c.scalePool, "scale-pool", 10_000_000, "-scale: shake envelopes in the pools before the kill")
	fs.IntVar(&c.scaleGroups, "scale-groups", 1_000_000, "-scale: live group envelopes before the kill")
	fs.DurationVar(&c.scaleTimeout, "scale-timeout", 5*time.Minute, "-scale: the longest the state may take to build")
	c.RunFlags.Add(fs, "crash", "crash-")
	harness.Usage(fs, `Runs bin/server with a -data directory of its own, campaigns, a probe and bin/loadclient
for -duration, kills the server with SIGKILL -crashes times at random moments (-seed) and
restarts it on the same -data and ports while the clients reconnect. Per crash: money told
against what the restart recovered, its times; at the end: money told == counted (the
requests a kill left unanswered sent again with their request ids), both
ledger invariants, no envelope id or share twice, every campaign at exactly its total.
-single: one kill, the load client stopped at it, a restart on new ports (2,000 users,
2,000 SHAKE/s unless -users, -qps). -scale: the recovery of 10M pooled shake envelopes
and 1M live group envelopes.

Exit status: 0 when every check passed, 1 when one failed, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	set := harness.Given(fs)
	if c.single && !set["users"] {
		c.users = defaultSingleUsers
	}
	if c.single && !set["qps"] {
		c.qps = defaultSingleQPS
	}
	var bad harness.Problems
	bad.Add(c.RunFlags.Validate(c.users, c.camps.Recipients), c.camps.Validate("send-campaign-rate"))
	bad.If(c.qps < 1 || c.sendRate < 0, "-qps=%d, -send-rate=%g: want at least 1 and 0 or more", c.qps, c.sendRate)
	bad.If(c.killAfter < 2*time.Second || c.killAfter > 10*time.Minute, "-kill-after=%v: want 2s..10m", c.killAfter)
	if c.crashes < 1 || c.crashes > 100 {
		bad.Add(fmt.Errorf("-crashes=%d: want 1..100", c.crashes))
	} else if slot := crashSlot(c.duration, c.crashes); slot < minSlot {
		bad.Add(fmt.Errorf("-duration=%v, -crashes=%d: %v between crashes, want at least %v (-duration ≥ %v)",
			c.duration, c.crashes, slot, minSlot, crashLead+crashTail+time.Duration(c.crashes)*minSlot))
	}
	bad.If(c.probes < 1 || c.probes > 1000, "-probes=%d: want 1..1000", c.probes)
	bad.If(c.scalePool < 1 || c.scaleGroups < 1, "-scale-pool=%d, -scale-groups=%d: want at least 1 each", c.scalePool, c.scaleGroups)
	bad.If(c.scaleTimeout < 10*time.Second, "-scale-timeout=%v: want at least 10s", c.scaleTimeout)
	return c, bad.Err()
}

func main() {
	// The run, and the bound of its length: its load and 4 minutes.
	pick := func(c config) (func(context.Context, config) error, time.Duration) {
		switch {
		case c.scale:
			return runScale, c.scaleTimeout
		case c.single:
			return runSingle, c.killAfter
		}
		return runCrashes, c.duration
	}
	bound := func(c config) time.Duration { _, d := pick(c); return d + 4*time.Minute }
	harness.Main("crash", parseFlags, bound, func(ctx context.Context, c config) error {
		run, _ := pick(c)
		return run(ctx, c)
	})
}
