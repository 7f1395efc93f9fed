// Command million is `make million`: a million logged-in connections on one
// host whose processes may each hold 20,000 files, over many server
// processes, each with a load client of its own; the ramp, the memory per
// connection, the load with campaigns, the money reconciled per server and
// summed. -help lists the flags and the steps.
package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// config is one run; the flags say what each field is.
type config struct {
	conns, perServer, servers, qps  int
	duration                        time.Duration
	shakeRate, sendRate, recipients int

	rampRate          int
	rampTimeout, hold time.Duration

	source                   string // "" or "auto": two addresses per load client from 127.0.0.2
	serverProcs, clientProcs int
	serverSlack, clientSlack time.Duration
	serverFlags, clientFlags string
	startJobs                int

	bin, out string
	headroom float64
}

func (c *config) Server() string { return filepath.Join(c.bin, "server") }
func (c *config) Client() string { return filepath.Join(c.bin, "loadclient") }

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.conns, "conns", 1000000, "connections in all, `N` users 1..N, each its own TCP connection on loopback")
	fs.IntVar(&c.perServer, "per-server", 18000, "most connections one server (and one load client) process holds, when -servers is 0: each process may open 20,000 files, less its listeners, log pipes and runtime")
	fs.IntVar(&c.servers, "servers", 0, "server processes, each with its own load client, on its own port (default ⌈conns / per-server⌉)")
	fs.IntVar(&c.qps, "qps", 60000, "SHAKEs a second (`rate`) of all users together, on the load clients' shared open-loop schedule")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long the SHAKE load and the campaigns run")
	fs.IntVar(&c.shakeRate, "shake-rate", 200, "shake campaign: envelopes a second (1..200 fen each), all servers together, split over them")
	fs.IntVar(&c.sendRate, "send-rate", 200, "send campaign: group envelopes a second (3..2000 fen each), all servers together, split over them")
	fs.IntVar(&c.recipients, "recipients", 3, "send campaign: recipients of each group envelope")
	fs.IntVar(&c.rampRate, "ramp-rate", 10000, "new connections a second (`rate`), all load clients together (each its share as -connect-rate); each costs both ends and the kernel's handshake")
	fs.DurationVar(&c.rampTimeout, "ramp-timeout", 0, "fail if the connections are not all up by then (default 5 × conns/ramp-rate + 60s)")
	fs.DurationVar(&c.hold, "hold", 10*time.Second, "hold the connections idle this long after the ramp, then read the memory and start the load")
	fs.StringVar(&c.source, "source", "auto", "the load clients' source `addresses` (IPs and ranges like 127.0.0.2-127.0.0.113), dealt out to the load clients (disjoint when there are enough); auto: two per load client from 127.0.0.2")
	fs.IntVar(&c.serverProcs, "server-gomaxprocs", 2, "GOMAXPROCS of each server process (0: the Go default)")
	fs.IntVar(&c.clientProcs, "client-gomaxprocs", 2, "GOMAXPROCS of each load-client process (0: the Go default)")
	fs.DurationVar(&c.serverSlack, "server-timer-slack", 10*time.Millisecond, "timer slack (prctl PR_SET_TIMERSLACK) of each server process: how late the kernel may end a timed sleep (the runtime's sysmon, the server's 5 ms tick) so as to wake it together with others, since context switches are what two cores run out of first (0: inherited, 50µs by default)")
	fs.DurationVar(&c.clientSlack, "client-timer-slack", 5*time.Millisecond, "timer slack of each load-client process: a send may go out up to this much after its scheduled time, together with the next ones; the latency counts it (0: inherited)")
	fs.StringVar(&c.serverFlags, "server-flags", "-sets 4 -ring 1024 -loops 1 -stages fused -yields -1", "server `flags`, space-separated; -listen, -admin and -log-format are million's (default: many small servers, fused stages that park right after spinning, since two cores serve them all)")
	fs.StringVar(&c.clientFlags, "client-flags", "-loops 1 -timeout 30s -grace 30s", "more load-client `flags`, space-separated; -server, -admin, -users, -total-users, -qps, -duration, -connect-rate, -source, -control, -report and -timeline are million's (default: up to 30 s for an answer, so that a saturated machine's queue shows in the latencies instead of breaking connections)")
	fs.IntVar(&c.startJobs, "start-jobs", 4, "servers started at a time")
	fs.StringVar(&c.bin, "bin", "bin", "`dir` holding the server and loadclient binaries (make build)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the run into `dir`/million-<time>/")
	fs.Float64Var(&c.headroom, "max-mem-share", 0.8, "refuse to start when the memory estimate is above this `share` of MemAvailable")
	harness.Usage(fs, `A million connections on one host whose processes may each open only 20,000 files:
-servers bin/server processes, each with its own ports and a bin/loadclient of its own that
takes a contiguous share of the users (-total-users: one open-loop schedule), its own -source
addresses and a share of -ramp-rate; a progress line a second until every server has all of
its users, -hold idle, the memory read (kernel first, then each server after a GC), the load
switched on at once through every client's -control with each server's share of the
campaigns, the memory again, then SIGTERM to the clients (each reconciles with its server),
every ledger and the sums checked, SIGTERM → exit 0 for every server. Bounded by
-ramp-timeout + -hold + -duration + 6 minutes; on an error every process is killed.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	if c.servers == 0 && c.perServer > 0 {
		c.servers = (c.conns + c.perServer - 1) / c.perServer
	}
	if c.rampTimeout == 0 && c.rampRate > 0 {
		c.rampTimeout = 5*time.Duration(c.conns)*time.Second/time.Duration(c.rampRate) + time.Minute
	}
	return c, c.validate()
}

func (c *config) validate() error {
	var bad harness.Problems
	bad.If(c.perServer < 2, "-per-server=%d: want at least 2", c.perServer)
	bad.If(c.servers < 1, "-servers=%d: want at least 1", c.servers)
	bad.If(c.servers >= 1 && (c.conns < 2*c.servers || c.conns/max(c.servers, 1) < c.recipients+1), "-conns=%d over %d servers: want more than %d users per server (a send campaign picks %d online users of one SET)", c.conns, c.servers, c.recipients, c.recipients)
	bad.If(c.qps < 1, "-qps=%d: want at least 1", c.qps)
	bad.If(c.duration < 5*time.Second || c.duration%time.Second != 0, "-duration=%v: want whole seconds, at least 5s", c.duration)
	bad.If(c.shakeRate < 0 || c.sendRate < 0, "-shake-rate=%d, -send-rate=%d: want 0 (off) or more", c.shakeRate, c.sendRate)
	bad.If(c.recipients < 1 || c.recipients > 100, "-recipients=%d: want 1..100 (the server's default -max-shares)", c.recipients)
	bad.If(c.rampRate < c.servers, "-ramp-rate=%d: want at least one connect a second per load client (%d)", c.rampRate, c.servers)
	bad.If(c.rampTimeout < time.Second, "-ramp-timeout=%v: want at least 1s", c.rampTimeout)
	bad.If(c.hold < 0, "-hold=%v is negative", c.hold)
	if c.source != "auto" && c.source != "" {
		_, err := harness.ParseLoopbackSources(c.source)
		bad.Add(err)
	}
	bad.If(c.serverProcs < 0 || c.clientProcs < 0, "-server-gomaxprocs=%d, -client-gomaxprocs=%d: want 0 or more", c.serverProcs, c.clientProcs)
	bad.If(c.serverSlack < 0 || c.clientSlack < 0 || c.serverSlack > time.Second || c.clientSlack > time.Second, "-server-timer-slack=%v, -client-timer-slack=%v: want 0..1s", c.serverSlack, c.clientSlack)
	bad.If(c.startJobs < 1, "-start-jobs=%d: want at least 1", c.startJobs)
	bad.If(c.headroom <= 0 || c.headroom > 1, "-max-mem-share=%v: want a share in (0, 1]", c.headroom)
	for _, f := range strings.Fields(c.clientFlags) {
		switch strings.TrimLeft(strings.SplitN(f, "=", 2)[0], "-") {
		case "server", "admin", "users", "total-users", "qps", "phases", "duration", "connect-rate", "source", "control", "report", "timeline", "procs":
			bad.If(true, "-client-flags: %s is million's to set", f)
		}
	}
	return bad.Err()
}

func main() {
	bound := func(c config) time.Duration { return c.rampTimeout + c.hold + c.duration + 6*time.Minute }
	harness.Main("million", parseFlags, bound, func(ctx context.Context, c config) error {
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
