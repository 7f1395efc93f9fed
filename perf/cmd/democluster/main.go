// Command democluster is `make demo-cluster`: the main job on a cluster of
// gateways. It starts a NATS server inside its own process
// (internal/embednats), the gateways as processes of the real server
// binary on loopback (-nats, -node I/N, the same -sets, each its own
// kernel-chosen ports and journal), and the load client against one
// gateway: users whose SET another gateway runs are sent there (LOGIN_ACK
// 3), SENDs, OPENs and CHATs cross gateways, a shake and a send campaign
// POSTed on one gateway are dealt by parts on all, and the load client
// reconciles strictly against GET /cluster/stats. It then reports per
// gateway and for the cluster: ledgers, crossings (/metrics), the
// reconciliation; it exits 1 when anything failed.
//
// Two more modes measure: -mode cpu is server CPU per SHAKE on a gateway of
// a 2-gateway cluster against a single server at the same load per process
// (SHAKEs never cross), -mode open the latency of OPENs that all cross to
// another gateway at a set rate.
//
// Run it from the module root after make build; -help lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"hongbao/perf/internal/harness"
)

// config is one run.
type config struct {
	mode       string
	gateways   int
	sets       int
	users      int
	qps        int
	duration   time.Duration
	ramp       time.Duration
	sendRate   float64 // the load client's SENDs a second
	chatRate   float64 // the load client's CHATs a second
	recips     int     // recipients of a SEND and of a campaign's envelope
	shake      int     // shake campaign: envelopes a second
	send       int     // send campaign: envelopes a second
	timeout    time.Duration
	openRate   int // -mode open: OPENs a second
	connsPerGW int // -mode open: connections on each of the two gateways
	openRounds int // -mode open: crossing and local phases, alternated
	harness.RunFlags
}

// perProcess is the most users one load-client process holds: the
// open-files limit of the development machine, less a margin.
const perProcess = 19000

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{duration: 30 * time.Second, ramp: 5 * time.Second, timeout: time.Second}
	fs.StringVar(&c.mode, "mode", "demo", "`mode`: demo (the cluster under load, reconciled), cpu (server CPU per SHAKE, a gateway of 2 vs a single server) or open (cross-gateway OPEN latency)")
	fs.IntVar(&c.gateways, "gateways", 3, "gateways of the cluster (`N`), each a server process with -node I/N")
	fs.IntVar(&c.sets, "sets", 24, "-sets of every gateway (`N`): gateway I runs the SETs s with s mod gateways == I")
	fs.IntVar(&c.users, "users", 30000, "users 1..`N`, each its own connection; -mode cpu: users per server process (default there 5000)")
	fs.IntVar(&c.qps, "qps", 20000, "SHAKEs a second of all users together (`rate`); -mode cpu: per server process (default there 5000)")
	fs.Func("duration", "how long the load runs after the ramp, `d`: a Go duration or whole seconds (default 30s; -mode open: each of its two kinds of phase, default 15s, split over -open-rounds)", func(s string) (err error) {
		c.duration, err = harness.ParseDuration(s)
		return err
	})
	fs.Func("ramp", "time for the users to connect and be redirected before the load, `d` (default 5s)", func(s string) (err error) {
		c.ramp, err = harness.ParseDuration(s)
		return err
	})
	fs.Float64Var(&c.sendRate, "send-rate", 200, "the load client's SENDs a second (`rate`), each to -recipients random users (of every gateway)")
	fs.Float64Var(&c.chatRate, "chat-rate", 200, "the load client's CHATs a second (`rate`), each to a random user")
	fs.IntVar(&c.recips, "recipients", 3, "recipients of each SEND and of each send campaign envelope")
	fs.IntVar(&c.shake, "shake-rate", 200, "shake campaign: envelopes a second over the cluster, amounts 1..200 fen")
	fs.IntVar(&c.send, "send-campaign-rate", 100, "send campaign: group envelopes a second over the cluster")
	fs.DurationVar(&c.timeout, "cluster-timeout", time.Second, "the gateways' -cluster-timeout: the bound on a crossing's answer")
	fs.IntVar(&c.openRate, "open-rate", 2000, "-mode open: OPENs a second, every one crossing to the other gateway")
	fs.IntVar(&c.openRounds, "open-rounds", 1, "-mode open: alternate a crossing and a local phase `N` times, each -duration/N long, latencies pooled per kind (the machine's noise falls on both alike)")
	fs.IntVar(&c.connsPerGW, "open-users", 200, "-mode open: users on each of the two gateways (senders on one, openers on the other)")
	c.RunFlags.Add(fs, "democluster", "democluster-", false)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: democluster [flags]

-mode demo (make demo-cluster): starts NATS inside this process, -gateways processes of
bin/server on 127.0.0.1 (-nats, -node I/N, -sets, each its own ports and journal), and
bin/loadclient with -server and -admin naming gateway 0 only: users are redirected to their
gateway (LOGIN_ACK 3), SENDs, OPENs and CHATs cross gateways. Once the users are in, a shake
and a send campaign are POSTed on gateway 1 and dealt by parts on every gateway. The load
client reconciles strictly with GET /cluster/stats; democluster checks every gateway's ledger
and the cluster's, reads the crossings from /metrics, stops the gateways with SIGTERM (exit 0
each) and writes report.txt, report.html and summary.json. 30,000 users take two load-client
processes (-procs): each process holds at most its open-files limit of connections.

-mode cpu: a single server and then a cluster of 2 gateways, each process with -users users
at -qps SHAKE/s for -duration (SHAKEs never cross): server CPU per SHAKE side by side.

-mode open: a cluster of 2 gateways; -open-users senders on gateway 0 SEND to recipients on
gateway 1, who OPEN each envelope at once: -open-rate OPENs a second, every one a crossing.
Latency of each OPEN from its write to its OPEN_RESULT, p50/p99/p99.9. -open-rounds N alternates
N crossing and N local phases, each -duration/N, so that the machine's noise falls on both; e.g.
-server-flags "-journal off" leaves the crossing without the journal's fdatasync.

Every process it starts stops by itself: the run is bounded by ramp + duration + 4 minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	set := harness.Given(fs)
	if c.mode == "cpu" { // per process: the demo's totals would not fit one load client
		if !set["users"] {
			c.users = 5000
		}
		if !set["qps"] {
			c.qps = 5000
		}
	}
	if c.mode == "open" && !set["duration"] {
		c.duration = 15 * time.Second
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.mode {
	case "demo", "cpu", "open":
	default:
		bad("-mode=%q: want demo, cpu or open", c.mode)
	}
	if c.gateways < 2 || c.gateways > 16 {
		bad("-gateways=%d: want 2..16", c.gateways)
	}
	if c.sets < c.gateways || c.sets > 4096 {
		bad("-sets=%d: want at least one SET per gateway, at most 4096", c.sets)
	}
	if c.qps < 0 {
		bad("-qps=%d: want 0 or more", c.qps)
	}
	if c.duration < 5*time.Second {
		bad("-duration=%v: want at least 5s", c.duration)
	}
	if c.ramp < time.Second {
		bad("-ramp=%v: want at least 1s", c.ramp)
	}
	if c.sendRate < 0 || c.chatRate < 0 {
		bad("-send-rate=%v, -chat-rate=%v: want 0 or more", c.sendRate, c.chatRate)
	}
	if c.shake < 1 || c.send < 1 {
		bad("-shake-rate=%d, -send-campaign-rate=%d: want at least 1 each", c.shake, c.send)
	}
	if c.timeout <= 0 {
		bad("-cluster-timeout=%v: want a positive duration", c.timeout)
	}
	if c.openRate < 1 || c.connsPerGW < 2 {
		bad("-open-rate=%d, -open-users=%d: want at least 1 and 2", c.openRate, c.connsPerGW)
	}
	if c.openRounds < 1 || c.openRounds > 60 || c.duration/time.Duration(max(1, c.openRounds)) < time.Second {
		bad("-open-rounds=%d: want 1..60, each phase at least 1s of -duration", c.openRounds)
	}
	// The open-files limit binds each gateway and each load-client process:
	// the demo's users spread over the gateways and over -procs clients.
	if err := c.RunFlags.Validate(max(2, c.recips+1), c.recips); err != nil {
		errs = append(errs, err)
	}
	perServer := c.users
	switch c.mode {
	case "demo":
		perServer = (c.users + c.gateways - 1) / c.gateways
	case "open":
		perServer = 2 * c.connsPerGW
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(perServer+harness.FDMargin) > lim.Cur {
		bad("-users=%d: %d connections on a server process need %d descriptors; the open-files limit is %d", c.users, perServer, perServer+harness.FDMargin, lim.Cur)
	}
	if c.mode == "demo" && c.users < c.recips+1 {
		bad("-users=%d: want more than -recipients", c.users)
	}
	if c.mode == "cpu" && c.users > perProcess {
		bad("-users=%d: -mode cpu runs one load client per server: at most %d", c.users, perProcess)
	}
	return c, errors.Join(errs...)
}

// procs is how many load-client processes hold n users.
func procs(n int) int { return (n + perProcess - 1) / perProcess }

func main() {
	bound := func(c config) time.Duration {
		if c.mode == "cpu" {
			return 2*(c.ramp+c.duration) + 4*time.Minute
		}
		return c.ramp + c.duration + 4*time.Minute
	}
	harness.Main("democluster", parseFlags, bound, func(ctx context.Context, c config) error {
		fmt.Printf("democluster %s\n", strings.Join(os.Args[1:], " "))
		switch c.mode {
		case "cpu":
			return runCPU(ctx, c, os.Stdout, os.Stderr)
		case "open":
			return runOpen(ctx, c, os.Stdout, os.Stderr)
		}
		return runDemo(ctx, c, os.Stdout, os.Stderr)
	})
}
