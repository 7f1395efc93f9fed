// Command crash is `make crash`: the durability contract checked on the real
// binaries. It starts bin/server with a -data directory of its own, a shake
// and a send campaign filling the pools, and bin/loadclient sending SHAKEs
// and SENDs and opening what it is pushed; a probe of a few users of its own
// records every envelope id it gets. After -kill-after it kills the server
// with SIGKILL, stops the load client (which reports what it was told), and
// starts the server again with the same flags and -data. It then reports:
//
//   - the money the clients were told (Σ SHAKE_RESULT 1 and Σ OPEN_RESULT 0
//     amounts the load client read before the kill) against what the
//     restarted server's /stats counts: every told figure must be counted,
//     and the difference is money made durable but never told, which the
//     contract allows;
//   - no envelope id handed out before the kill is handed out again (the
//     probe's SHAKEs and SENDs before and after);
//   - the campaigns resumed and ended at exactly their totals;
//   - the server's "recovered" log line: time, envelopes, fen.
//
// With -scale it builds the state the restart target is set for instead
// (-scale-pool waiting shake envelopes and -scale-groups live group
// envelopes, by campaigns at high rates with a few idle recipients online),
// kills the server, restarts it and reports the recovery's time and the
// restarted server's RSS.
//
// Every process it starts is its own and stops by itself: the run is bounded
// (-kill-after plus four minutes; -scale: -scale-timeout plus four minutes),
// loopback only. Run it from the module root after make build; -help lists
// the flags.
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
	killAfter  time.Duration // load before the kill
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

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.users, "users", 2000, "the load client's users 1..`N`")
	fs.IntVar(&c.qps, "qps", 2000, "the load client's SHAKEs a second (`rate`)")
	fs.Float64Var(&c.sendRate, "send-rate", 50, "the load client's SENDs a second (`rate`); it OPENs every envelope it is pushed")
	fs.DurationVar(&c.killAfter, "kill-after", 10*time.Second, "SIGKILL the server this long after the campaigns start")
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
on loopback, kills the server with SIGKILL mid-run, starts it again on the same
-data and reports what the clients were told against what the restarted server
counts, envelope ids, the campaigns and the recovery. -scale: the recovery of
10M pooled shake envelopes and 1M live group envelopes instead.

Exit status: 0 when every check passed, 1 when one failed, 2 for a bad command line.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
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
		if c.scale {
			return c.scaleTimeout + 4*time.Minute
		}
		return c.killAfter + 4*time.Minute
	}
	harness.Main("crash", parseFlags, bound, func(ctx context.Context, c config) error {
		if c.scale {
			return runScale(ctx, c, os.Stdout, os.Stderr)
		}
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
