// Command soak is `make soak`: a long run at half the machine's maximum
// SHAKE rate with connection churn and campaigns, sampling the server's RSS,
// heap, goroutines and descriptors to show that none grows (least-squares
// slopes per minute), and reconciling the money at the end. -help lists the
// flags and the steps.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// config is one soak run.
type config struct {
	duration  time.Duration // at -qps, after the ramp
	ramp      time.Duration // QPS 0 while the users connect
	qps       int
	users     int
	churn     float64       // reconnects a second
	timeout   time.Duration // the load client's -timeout
	interval  time.Duration
	gc        bool          // collect garbage in the server before each heap reading
	retention time.Duration // the server's -opened-retention; 0: its default
	camps     harness.Campaigns

	harness.RunFlags // -source, -bin, -out, -server-flags, -client-flags
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long the load runs at -qps, after -ramp (whole seconds)")
	fs.DurationVar(&c.ramp, "ramp", 20*time.Second, "first, QPS 0 while the users connect and log in (whole seconds)")
	fs.IntVar(&c.qps, "qps", 30000, "SHAKEs a second (`rate`) of all users together: half of what make perf holds on this machine")
	fs.IntVar(&c.users, "users", 19000, "users 1..`N`, each its own connection; N plus a margin must fit the open-files limit of each process")
	fs.Float64Var(&c.churn, "churn", 100, "reconnects a second (`rate`): a random logged-in user with nothing in flight closes its connection and connects again (the load client's -churn)")
	fs.DurationVar(&c.timeout, "client-timeout", 30*time.Second, "the load client's -timeout: a connection waiting this long for an answer is dropped and its answers lost to the reconciliation, so it must ride out a stall of a shared machine")
	fs.DurationVar(&c.interval, "interval", 10*time.Second, "sample the server every `d`: VmRSS and the open descriptors (/proc/PID), goroutines and heap (GET /metrics)")
	fs.BoolVar(&c.gc, "gc", true, "collect garbage in the server before each heap reading (GET /debug/pprof/heap?gc=1): the heap sampled is live memory")
	c.camps.Add(fs, 200, "send-rate", 200)
	fs.DurationVar(&c.retention, "opened-retention", 2*time.Minute, "the server's -opened-retention (0: its default, 10m): the heap grows with the send campaign's opened envelopes until the first of them go; at 2m that is within the first half, whose slopes the verdict leaves out")
	c.RunFlags.Add(fs, "soak", "soak-")
	harness.Usage(fs, `A long run on loopback: bin/server, bin/loadclient with -churn and strict reconciliation,
campaigns once the users are in, and every -interval the server's VmRSS, descriptors,
goroutines, heap, stacks and threads (after a forced GC with -gc). At the end each figure's
least-squares slope per minute over the load and its second half, the reconciliation and
the ledger. Bounded by -ramp + -duration + 5 minutes.

Exit status: 0 when the run passed, 1 when the reconciliation or a ledger check failed,
the load client reported errors or the server did not exit 0, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	return c, c.validate()
}

// validate reports every bad flag, each with its reason.
func (c *config) validate() error {
	var bad harness.Problems
	bad.Add(c.RunFlags.Validate(c.users, c.camps.Recipients), c.camps.Validate("send-rate"))
	bad.If(c.duration < 30*time.Second || c.duration%time.Second != 0, "-duration=%v: want whole seconds, at least 30s", c.duration)
	bad.If(c.ramp < time.Second || c.ramp%time.Second != 0, "-ramp=%v: want whole seconds, at least 1s", c.ramp)
	bad.If(c.qps < 1 || c.qps > loadclient.MaxQPS, "-qps=%d: want 1..%d", c.qps, loadclient.MaxQPS)
	bad.If(c.timeout < time.Second, "-client-timeout=%v: want at least 1s", c.timeout)
	bad.If(c.churn < 0, "-churn=%v: want 0 or more", c.churn)
	bad.If(c.interval < time.Second || c.interval > c.duration/4, "-interval=%v: want at least 1s and at most a quarter of -duration, so each half has samples", c.interval)
	bad.If(c.retention < 0 || (c.retention > 0 && c.retention < time.Second), "-opened-retention=%v: want 0 (the server's default) or at least 1s", c.retention)
	return bad.Err()
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
