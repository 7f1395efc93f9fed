// Command democluster is `make demo-cluster`: the main job on a cluster of
// gateways (a nats-server process, the real server binary as gateways,
// the load client against one of them: users redirected, SENDs, OPENs and
// CHATs crossing, campaigns dealt by parts), reconciled strictly with GET
// /cluster/stats. -mode cpu compares server CPU per SHAKE of a gateway with
// a single server's, -mode open times OPENs that cross gateways.
// perf/README.md has the steps; -help lists the flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// config is one run.
type config struct {
	mode       string
	journal    string // the gateways' -journal: on (each its own) or jetstream (3 NATS servers, R3)
	gateways   int
	sets       int
	users      int
	qps        int
	duration   time.Duration
	ramp       time.Duration
	sendRate   float64           // the load client's SENDs a second
	chatRate   float64           // the load client's CHATs a second
	camps      harness.Campaigns // Recipients: of a SEND too
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
	var c config
	fs.StringVar(&c.mode, "mode", "demo", "`mode`: demo (the cluster under load, reconciled), cpu (server CPU per SHAKE, a gateway of 2 vs a single server) or open (cross-gateway OPEN latency)")
	fs.StringVar(&c.journal, "journal", "on", "the gateways' `journal`: on (each its own file journal, one nats-server process of -bin without JetStream) or jetstream (every SET's journal replicated on 3 nats-server processes of -bin, -replicas 3, synced at every write; SETs fail over)")
	fs.IntVar(&c.gateways, "gateways", 3, "gateways of the cluster (`N`), each a server process with -node I/N")
	fs.IntVar(&c.sets, "sets", 24, "-sets of every gateway (`N`): gateway I runs the SETs s with s mod gateways == I")
	fs.IntVar(&c.users, "users", 30000, "users 1..`N`, each its own connection; -mode cpu: users per server process (default there 5000)")
	fs.IntVar(&c.qps, "qps", 20000, "SHAKEs a second of all users together (`rate`); -mode cpu: per server process (default there 5000)")
	harness.DurationVar(fs, &c.duration, "duration", 30*time.Second, "how long the load runs after the ramp, `d` (-mode open: each of its two kinds of phase, default 15s, split over -open-rounds)")
	harness.DurationVar(fs, &c.ramp, "ramp", 5*time.Second, "time for the users to connect and be redirected before the load, `d`")
	fs.Float64Var(&c.sendRate, "send-rate", 200, "the load client's SENDs a second (`rate`), each to -recipients random users (of every gateway)")
	fs.Float64Var(&c.chatRate, "chat-rate", 200, "the load client's CHATs a second (`rate`), each to a random user")
	c.camps.Add(fs, 200, "send-campaign-rate", 100)
	fs.DurationVar(&c.timeout, "cluster-timeout", time.Second, "the gateways' -cluster-timeout: the bound on a crossing's answer")
	fs.IntVar(&c.openRate, "open-rate", 2000, "-mode open: OPENs a second, every one crossing to the other gateway")
	fs.IntVar(&c.openRounds, "open-rounds", 1, "-mode open: alternate a crossing and a local phase `N` times, each -duration/N long, latencies pooled per kind (the machine's noise falls on both alike)")
	fs.IntVar(&c.connsPerGW, "open-users", 200, "-mode open: users on each of the two gateways (senders on one, openers on the other)")
	c.RunFlags.Add(fs, "democluster", "democluster-")
	harness.Usage(fs, `-mode demo (make demo-cluster): bin/nats-server, -gateways processes of bin/server
(-nats, -node I/N, -sets), bin/loadclient with -server and -admin naming gateway 0 (users
redirected, SENDs, OPENs and CHATs crossing, -procs as the open-files limit needs), campaigns
POSTed on gateway 1 and dealt by parts; strict reconciliation with GET /cluster/stats, every
ledger checked, the crossings read from /metrics, SIGTERM → exit 0 for each gateway.
-mode cpu: a single server and 2 gateways at once, each process with -users at -qps and a shake
campaign of -shake-rate (0: none, every SHAKE empty): CPU per SHAKE, side by side.
-mode open: 2 gateways, -open-users senders on one SEND to openers on the other, who OPEN at
once: -open-rate crossing OPENs a second, then local ones, alternated -open-rounds times;
latency from the write to OPEN_RESULT. Bounded by ramp + duration + 4 minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.
`)
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
	var bad harness.Problems
	bad.If(c.mode != "demo" && c.mode != "cpu" && c.mode != "open", "-mode=%q: want demo, cpu or open", c.mode)
	bad.If(c.journal != "on" && c.journal != "jetstream", "-journal=%q: want on or jetstream", c.journal)
	bad.If(c.journal == "jetstream" && c.mode == "open", "-journal=jetstream: -mode demo or cpu")
	bad.If(c.gateways < 2 || c.gateways > 16, "-gateways=%d: want 2..16", c.gateways)
	bad.If(c.sets < c.gateways || c.sets > 4096, "-sets=%d: want at least one SET per gateway, at most 4096", c.sets)
	bad.If(c.qps < 0, "-qps=%d: want 0 or more", c.qps)
	bad.If(c.duration < 5*time.Second, "-duration=%v: want at least 5s", c.duration)
	bad.If(c.ramp < time.Second, "-ramp=%v: want at least 1s", c.ramp)
	bad.If(c.sendRate < 0 || c.chatRate < 0, "-send-rate=%v, -chat-rate=%v: want 0 or more", c.sendRate, c.chatRate)
	if c.mode != "cpu" || c.camps.Shake != 0 { // -mode cpu -shake-rate 0: empty SHAKEs only
		bad.Add(c.camps.Validate("send-campaign-rate"))
	}
	bad.If(c.timeout <= 0, "-cluster-timeout=%v: want a positive duration", c.timeout)
	bad.If(c.openRate < 1 || c.connsPerGW < 2, "-open-rate=%d, -open-users=%d: want at least 1 and 2", c.openRate, c.connsPerGW)
	bad.If(c.openRounds < 1 || c.openRounds > 60 || c.duration/time.Duration(max(1, c.openRounds)) < time.Second, "-open-rounds=%d: want 1..60, each phase at least 1s of -duration", c.openRounds)
	// The open-files limit binds each gateway and each load-client process:
	// the demo's users spread over the gateways and over -procs clients.
	if err := c.RunFlags.Validate(max(2, c.camps.Recipients+1), c.camps.Recipients); err != nil {
		bad.Add(err)
	}
	perServer := c.users
	switch c.mode {
	case "demo":
		perServer = (c.users + c.gateways - 1) / c.gateways
	case "open":
		perServer = 2 * c.connsPerGW
	}
	var lim syscall.Rlimit
	err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	bad.If(err == nil && uint64(perServer+harness.FDMargin) > lim.Cur, "-users=%d: %d connections on a server process need %d descriptors; the open-files limit is %d", c.users, perServer, perServer+harness.FDMargin, lim.Cur)
	bad.If(c.mode == "demo" && c.users < c.camps.Recipients+1, "-users=%d: want more than -recipients", c.users)
	bad.If(c.mode == "cpu" && c.users > perProcess, "-users=%d: -mode cpu runs one load client per server: at most %d", c.users, perProcess)
	return c, bad.Err()
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
		run := map[string]func(context.Context, config, *harness.Run) error{"demo": runDemo, "cpu": runCPU, "open": runOpen}[c.mode]
		prefix := "democluster-"
		if c.mode != "demo" {
			prefix += c.mode + "-"
		}
		r, err := harness.NewRun(c.Out, prefix, "democluster", os.Stdout, os.Stderr)
		if err != nil {
			return err
		}
		return run(ctx, c, r)
	})
}

// newCluster is the cluster of a run of gateways over a nats-server
// process with a NATS user per gateway, allowed its own subjects only; with
// -journal jetstream, over 3 with JetStream, each gateway's user allowed
// the journal's stream too. stop ends it all.
func newCluster(ctx context.Context, cfg *config, r *harness.Run, sets, gateways int) (cl *harness.Cluster, stop func(), err error) {
	cl = &harness.Cluster{Bin: cfg.Server(), Sets: sets, Timeout: cfg.timeout.String(), Extra: strings.Fields(cfg.ServerFlags), Dir: r.Dir, Echo: r.Stderr}
	l, n := jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: sets, Gateways: gateways}, 1
	if cfg.journal == "jetstream" {
		l.Replicas, n = 3, 3
		cl.Extra = append([]string{"-journal", "jetstream", "-replicas", "3"}, cl.Extra...)
	}
	ids, js, stopNATS, err := r.StartGatewaysNATS(ctx, cfg.NATSServer(), n, l)
	if err != nil {
		return nil, nil, err
	}
	cl.NATS, cl.Auth = js, harness.IdentityArgs(ids)
	return cl, func() { cl.Cleanup(); stopNATS() }, nil
}
