// Command crash is `make crash`: the durability contract checked on the real
// binaries, under load and across several crashes. It starts bin/server with
// a -data directory of its own, bin/loadclient with -users at -qps SHAKEs a
// second and -send-rate SENDs (opening every envelope it is pushed,
// -reconcile at-least: it reconnects after each crash and counts what a
// crash cut off as unanswered, never as money), a shake and a send campaign
// spanning the run, and a probe of a few users of its own that SHAKE, SEND to
// each other, OPEN what they are pushed and reconnect after each crash. At
// -crashes random moments (-seed) it kills the server with SIGKILL, reads what
// the clients were told by then, and starts the server again with the same
// flags, -data and ports. It reports:
//
//   - for each crash: the money told before it (Σ SHAKE_RESULT 1 and Σ
//     OPEN_RESULT 0 amounts, the load client's and the probe's) against what
//     the restarted server recovered (its "recovered" log line), the
//     recovery's time, exec to serving, the kill to serving, and how long the
//     users took to be connected again;
//   - at the end, across every crash: the money told ≤ the server's count,
//     the difference printed (durable, never told: an answer cut off by a
//     crash, which the contract allows); both ledger invariants exact; no
//     envelope id handed out twice and no share drawn twice (the probe's, and
//     a re-OPEN after each restart answers 1 with the same share); every
//     campaign ended at exactly its total.
//
// -single is the one-kill run: the load client stopped at the kill, the
// restart on new ports. With -scale it builds the state the restart target is
// set for instead (-scale-pool waiting shake envelopes and -scale-groups live
// group envelopes, by campaigns at high rates with a few idle recipients
// online), kills the server, restarts it and reports the recovery's time and
// the restarted server's RSS.
//
// Every process it starts is its own and stops by itself: the run is bounded
// (-duration plus four minutes; -single: -kill-after plus four minutes;
// -scale: -scale-timeout plus four minutes), loopback only. Run it from the
// module root after make build; -help lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"hongbao/perf/internal/harness"
)

// config is one crash run.
type config struct {
	users      int           // load client users 1..users
	qps        int           // SHAKEs a second
	sendRate   float64       // the load client's SENDs a second
	killAfter  time.Duration // -single: load before the kill
	crashes    int           // kills under one load client run
	duration   time.Duration // the load client's run, every crash within it
	seed       uint64        // the crash moments' random source
	single     bool          // one kill, the load client stopped at it
	shakeRate  int           // shake campaign: envelopes a second
	sendCamp   int           // send campaign: envelopes a second
	recipients int
	probes     int // probe users, after the load client's

	scale        bool
	scalePool    int
	scaleGroups  int
	scaleTimeout time.Duration

	harness.RunFlags // -source, -bin, -out, -server-flags, -client-flags
}

// Defaults: the target load of the crash run, and the smaller one -single
// keeps unless -users and -qps are given.
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
	fs.IntVar(&c.shakeRate, "shake-rate", 2000, "shake campaign: envelopes a second; it is sized to outlive the kill by 5 s")
	fs.IntVar(&c.sendCamp, "send-campaign-rate", 200, "send campaign: group envelopes a second; sized like the shake campaign")
	fs.IntVar(&c.recipients, "recipients", 3, "send campaign: recipients of each envelope")
	fs.IntVar(&c.probes, "probes", 8, "probe users (after the load client's) that record the envelope ids they get, before the kill and after the restart")
	fs.BoolVar(&c.scale, "scale", false, "instead: build -scale-pool waiting shake envelopes and -scale-groups live group envelopes, kill -9, restart, report the recovery's time and RSS")
	fs.IntVar(&c.scalePool, "scale-pool", 10_000_000, "-scale: shake envelopes in the pools before the kill")
	fs.IntVar(&c.scaleGroups, "scale-groups", 1_000_000, "-scale: live group envelopes before the kill")
	fs.DurationVar(&c.scaleTimeout, "scale-timeout", 5*time.Minute, "-scale: the longest the state may take to build")
	c.RunFlags.Add(fs, "crash", "crash-", false)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: crash [flags]

Runs bin/server with a -data directory of its own, campaigns and bin/loadclient
on loopback (19,000 users, 30,000 SHAKE/s) for -duration, kills the server with
SIGKILL -crashes times at random moments (-seed) and starts it again each time
on the same -data and ports while the load client reconnects and goes on. It
reports each crash's recovery and what the clients were told before it against
what the restarted server recovered, then across every crash: money told ≤
counted, both ledger invariants exact, no envelope id handed out twice, no share
drawn twice, every campaign at exactly its total.

-single: one kill, the load client stopped at it, a restart on new ports (2,000
users, 2,000 SHAKE/s unless -users, -qps). -scale: the recovery of 10M pooled
shake envelopes and 1M live group envelopes instead.

Exit status: 0 when every check passed, 1 when one failed, 2 for a bad command line.

Flags:
`)
		fs.PrintDefaults()
	}
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
	var errs []error
	if err := c.RunFlags.Validate(c.users, c.recipients); err != nil {
		errs = append(errs, err)
	}
	if c.qps < 1 || c.sendRate < 0 {
		errs = append(errs, fmt.Errorf("-qps=%d, -send-rate=%g: want at least 1 and 0 or more", c.qps, c.sendRate))
	}
	if c.killAfter < 2*time.Second || c.killAfter > 10*time.Minute {
		errs = append(errs, fmt.Errorf("-kill-after=%v: want 2s..10m", c.killAfter))
	}
	if c.crashes < 1 || c.crashes > 100 {
		errs = append(errs, fmt.Errorf("-crashes=%d: want 1..100", c.crashes))
	} else if slot := crashSlot(c.duration, c.crashes); slot < minSlot {
		errs = append(errs, fmt.Errorf("-duration=%v, -crashes=%d: %v between crashes, want at least %v (-duration ≥ %v)",
			c.duration, c.crashes, slot, minSlot, crashLead+crashTail+time.Duration(c.crashes)*minSlot))
	}
	if c.shakeRate < 1 || c.sendCamp < 1 {
		errs = append(errs, fmt.Errorf("-shake-rate=%d, -send-campaign-rate=%d: want at least 1 each", c.shakeRate, c.sendCamp))
	}
	if c.probes < 1 || c.probes > 1000 {
		errs = append(errs, fmt.Errorf("-probes=%d: want 1..1000", c.probes))
	}
	if c.scalePool < 1 || c.scaleGroups < 1 {
		errs = append(errs, fmt.Errorf("-scale-pool=%d, -scale-groups=%d: want at least 1 each", c.scalePool, c.scaleGroups))
	}
	if c.scaleTimeout < 10*time.Second {
		errs = append(errs, fmt.Errorf("-scale-timeout=%v: want at least 10s", c.scaleTimeout))
	}
	return c, errors.Join(errs...)
}

func main() {
	bound := func(c config) time.Duration {
		switch {
		case c.scale:
			return c.scaleTimeout + 4*time.Minute
		case c.single:
			return c.killAfter + 4*time.Minute
		}
		return c.duration + 4*time.Minute
	}
	harness.Main("crash", parseFlags, bound, func(ctx context.Context, c config) error {
		switch {
		case c.scale:
			return runScale(ctx, c, os.Stdout, os.Stderr)
		case c.single:
			return run(ctx, c, os.Stdout, os.Stderr)
		}
		return runCrashes(ctx, c, os.Stdout, os.Stderr)
	})
}
