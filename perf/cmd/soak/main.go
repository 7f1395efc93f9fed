// Command soak is `make soak`: a long run at half the machine's maximum
// SHAKE rate with connection churn and campaigns running, sampling the
// server's RSS, heap, goroutines and open descriptors every -interval, to
// show that none of them grows. At the end it prints and writes the slope of
// each (per minute, over the whole load and over its second half, after the
// warm-up) and the reconciliation of the load client's money with the
// server's ledger. It exits 1 when the reconciliation or a ledger check
// fails, the load client reports errors, or the server does not exit 0 on
// SIGTERM.
//
// Run it from the module root after make build; -help lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// config is one soak run.
type config struct {
	duration   time.Duration // at -qps, after the ramp
	ramp       time.Duration // QPS 0 while the users connect
	qps        int
	users      int
	churn      float64       // reconnects a second
	timeout    time.Duration // the load client's -timeout
	interval   time.Duration
	gc         bool // collect garbage in the server before each heap reading
	shakeRate  int
	sendRate   int
	recipients int
	retention  time.Duration // the server's -opened-retention; 0: its default

	harness.RunFlags // -source, -bin, -out, -server-flags, -client-flags
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long the load runs at -qps, after -ramp (whole seconds)")
	fs.DurationVar(&c.ramp, "ramp", 20*time.Second, "first, QPS 0 while the users connect and log in (whole seconds)")
	fs.IntVar(&c.qps, "qps", 30000, "SHAKEs a second (`rate`) of all users together. The default is half the maximum of this\n"+
		"2-core machine: make perf holds 60,000 SHAKE/s at 19,000 users with server and load client\n"+
		"sharing the cores, its ceiling; a soak runs at half of it")
	fs.IntVar(&c.users, "users", 19000, "users 1..`N`, each its own connection; the server and the load client each hold N\n"+
		"descriptors, so N plus a margin must fit the open-files limit (20,000 here)")
	fs.Float64Var(&c.churn, "churn", 100, "connection churn, reconnects a second (`rate`): a random logged-in user with nothing in\n"+
		"flight closes its connection and connects again (the load client's -churn); at 100/s each of\n"+
		"19,000 users reconnects about every 3 minutes")
	fs.DurationVar(&c.timeout, "client-timeout", 30*time.Second, "the load client's -timeout: a connection waiting this long for an answer is dropped, and\n"+
		"the answers the server wrote to it are lost to the reconciliation. Its own default, 5s, does\n"+
		"not ride out a stall of a shared machine (one of 25 s was seen here); the latency figures\n"+
		"still show such a stall")
	fs.DurationVar(&c.interval, "interval", 10*time.Second, "sample the server every `d`: VmRSS and the open descriptors (/proc/PID), goroutines and\n"+
		"heap (GET /metrics)")
	fs.BoolVar(&c.gc, "gc", true, "collect garbage in the server before each heap reading (GET /debug/pprof/heap?gc=1), so the\n"+
		"heap sampled is live memory rather than garbage waiting for the next cycle")
	fs.IntVar(&c.shakeRate, "shake-rate", 200, "shake campaign: envelopes a second (1..200 fen), the whole load")
	fs.IntVar(&c.sendRate, "send-rate", 200, "send campaign: system group envelopes a second (recipients..2000 fen), the whole load")
	fs.IntVar(&c.recipients, "recipients", 3, "send campaign: recipients of each group envelope")
	fs.DurationVar(&c.retention, "opened-retention", 2*time.Minute, "the server's -opened-retention: how long it keeps fully opened group envelopes (its\n"+
		"default is 10m). The send campaign adds -send-rate a second, so the heap grows until they\n"+
		"start to go: at 2m that is over within the first half of a 10-minute soak, and the second half's\n"+
		"slopes show leaks, not the retention filling up. 0: the server's default")
	c.RunFlags.Add(fs, "soak", "soak-", false)
	fs.Usage = func() { usage(fs) }
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	return c, c.validate()
}

func usage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `usage: soak [flags]

A soak run on loopback, bounded by -ramp + -duration + 5 minutes:

  1. bin/server on 127.0.0.1 (kernel-chosen ports), log in server.log
  2. bin/loadclient -users 1-N -phases 0@RAMP,QPS@DURATION -churn C -source … -admin …
     -report report.json -timeline timeline.csv (strict reconciliation at the end)
  3. once the users are in: POST /campaigns/shake?rate=200&… and /campaigns/send?rate=200&…,
     sized to run until 3 s before the load ends
  4. every -interval: VmRSS (/proc/PID/status), open descriptors (ls /proc/PID/fd), then
     GET /debug/pprof/heap?gc=1 (with -gc) and GET /metrics (goroutines, heap, stacks)
  5. after the load: GET /stats and /campaigns, the ledger's invariants, SIGTERM, exit 0

It prints a line per sample and at the end a table of each figure's least-squares slope
per minute, over the whole load and over its second half (after the warm-up): flat is the
target. Everything lands in -out/soak-<time>/: report.md, samples.csv, commands.txt, the
logs and the load client's report. The machine's other work shows in the figures.

Exit status: 0 when the run passed, 1 when the reconciliation or a ledger check failed,
the load client reported errors or the server did not exit 0, 2 for a bad command line.

Flags:
`)
	fs.PrintDefaults()
}

// validate reports every bad flag, each with its reason.
func (c *config) validate() error {
	errs := []error{c.RunFlags.Validate(c.users, c.recipients)}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.duration < 30*time.Second || c.duration%time.Second != 0 {
		bad("-duration=%v: want whole seconds, at least 30s", c.duration)
	}
	if c.ramp < time.Second || c.ramp%time.Second != 0 {
		bad("-ramp=%v: want whole seconds, at least 1s", c.ramp)
	}
	if c.qps < 1 || c.qps > loadclient.MaxQPS {
		bad("-qps=%d: want 1..%d", c.qps, loadclient.MaxQPS)
	}
	if c.timeout < time.Second {
		bad("-client-timeout=%v: want at least 1s", c.timeout)
	}
	if c.churn < 0 {
		bad("-churn=%v: want 0 or more", c.churn)
	}
	if c.interval < time.Second || c.interval > c.duration/4 {
		bad("-interval=%v: want at least 1s and at most a quarter of -duration, so each half has samples", c.interval)
	}
	if c.shakeRate < 1 || c.sendRate < 1 {
		bad("-shake-rate=%d, -send-rate=%d: want at least 1 each", c.shakeRate, c.sendRate)
	}
	if c.retention < 0 || (c.retention > 0 && c.retention < time.Second) {
		bad("-opened-retention=%v: want 0 (the server's default) or at least 1s", c.retention)
	}
	return errors.Join(errs...)
}

// plan is the load client's -phases.
func (c *config) plan() string {
	return fmt.Sprintf("0@%ds,%d@%ds", int(c.ramp.Seconds()), c.qps, int(c.duration.Seconds()))
}

func main() {
	bound := func(c config) time.Duration { return c.ramp + c.duration + 5*time.Minute }
	harness.Main("soak", parseFlags, bound, func(ctx context.Context, c config) error {
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
