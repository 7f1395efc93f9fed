// Command million is `make million`: a million logged-in connections on this
// host although each process may hold only 20,000 open files. It starts
// several bin/server processes, each on its own loopback port with its own
// admin port, and one bin/loadclient per server that logs its share of the
// users in to that server only, from its own loopback source addresses. It
// brings the connections up at a bounded rate with a progress line a second,
// holds them idle, then runs the SHAKE load with a shake campaign and a send
// campaign split over the servers, reconciles the money per server and
// summed, and reports memory per connection (each process's user space, the
// kernel's Slab) and how long the ramp took. -help lists the flags and the
// steps.
//
// Run it from the module root after make build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// config is one run.
type config struct {
	conns      int // connections (users) in all
	perServer  int // most connections one server process holds, when servers is 0
	servers    int // server processes (and load-client processes); 0: ⌈conns/perServer⌉
	qps        int // SHAKEs a second of all users together
	duration   time.Duration
	shakeRate  int // shake campaign: envelopes a second, all servers together
	sendRate   int // send campaign: group envelopes a second, all servers together
	recipients int

	rampRate    int           // new connections a second, all load clients together
	rampTimeout time.Duration // 0: derived from conns and rampRate
	hold        time.Duration // idle after the ramp, before the memory reading and the load

	source      string        // "" or "auto": two addresses per load client from 127.0.0.2
	serverProcs int           // GOMAXPROCS of each server
	clientProcs int           // GOMAXPROCS of each load client
	serverSlack time.Duration // timer slack of each server process (0: inherited)
	clientSlack time.Duration
	serverFlags string // server flags, space-separated
	clientFlags string // more load-client flags, space-separated
	startJobs   int    // servers started at once

	bin, out string
	headroom float64 // refuse to start when the estimate needs more than this share of MemAvailable
}

// The defaults and their reasons.
const (
	defaultPerServer = 18000 // 20,000 open files less the listeners, admin, log pipes and runtime, with room
	defaultRampRate  = 10000 // connects a second: each costs the two cores some 50 µs (both ends, the kernel's handshake)
	// defaultServerFlags keeps each of the ~56 servers small: 4 SETs of 1,024
	// slots preallocate 0.5 MiB (the default 32 × 2048 is 8 MiB), and one
	// ingress loop, since two cores serve them all. Fused stages (one
	// goroutine per SET, one wake-up per batch instead of four) that park
	// right after spinning: 56 pairs at 60,000 SHAKE/s took 17.8 µs of
	// server CPU per SHAKE so, 19.8 µs with pipelined stages.
	defaultServerFlags = "-sets 4 -ring 1024 -loops 1 -stages fused -yields -1"
	// defaultClientFlags: one event loop per load client; and since 112
	// processes share two cores, a wait of up to 30 s for an answer (and for
	// the answers in flight at the end) before a connection counts as timed
	// out and reconnects: a queue on a saturated machine shows in the
	// latencies instead of breaking connections and the reconciliation.
	defaultClientFlags = "-loops 1 -timeout 30s -grace 30s"
	// The timer slacks let the kernel coalesce the timed wake-ups of the
	// 112 processes (prctl PR_SET_TIMERSLACK; the default is 50 µs): at
	// 1,071 SHAKE/s a load client otherwise wakes once per send, and context
	// switches are what two cores run out of first. 56 pairs at 60,000
	// SHAKE/s (112,000 connections, 30 s): SHAKE p50 6.5 s with neither
	// (queues of seconds), 0.05–1.1 s with 2 ms each, 18–23 ms with 10 ms
	// for the servers (their sysmon and 5 ms tick; no timed wait on the
	// request path) and 5 ms for the load clients (a send may leave up to
	// 5 ms late, which its latency counts).
	defaultServerSlack = 10 * time.Millisecond
	defaultClientSlack = 5 * time.Millisecond
)

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.conns, "conns", 1000000, "connections in all, `N` users 1..N, each its own TCP connection on loopback")
	fs.IntVar(&c.perServer, "per-server", defaultPerServer, "most connections one server (and one load client) process holds, when -servers is 0: each process may open 20,000 files")
	fs.IntVar(&c.servers, "servers", 0, "server processes, each with its own load client, on its own port (default ⌈conns / per-server⌉)")
	fs.IntVar(&c.qps, "qps", 60000, "SHAKEs a second (`rate`) of all users together, on the load clients' shared open-loop schedule")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long the SHAKE load and the campaigns run")
	fs.IntVar(&c.shakeRate, "shake-rate", 200, "shake campaign: envelopes a second (1..200 fen each), all servers together, split over them")
	fs.IntVar(&c.sendRate, "send-rate", 200, "send campaign: group envelopes a second (3..2000 fen each), all servers together, split over them")
	fs.IntVar(&c.recipients, "recipients", 3, "send campaign: recipients of each group envelope")
	fs.IntVar(&c.rampRate, "ramp-rate", defaultRampRate, "new connections a second (`rate`), all load clients together (each its share as -connect-rate)")
	fs.DurationVar(&c.rampTimeout, "ramp-timeout", 0, "fail if the connections are not all up by then (default 5 × conns/ramp-rate + 60s)")
	fs.DurationVar(&c.hold, "hold", 10*time.Second, "hold the connections idle this long after the ramp, then read the memory and start the load")
	fs.StringVar(&c.source, "source", "auto", "the load clients' source `addresses` (IPs and ranges like 127.0.0.2-127.0.0.113), dealt out to the load clients (disjoint when there are enough); auto: two per load client from 127.0.0.2")
	fs.IntVar(&c.serverProcs, "server-gomaxprocs", 2, "GOMAXPROCS of each server process (0: the Go default)")
	fs.IntVar(&c.clientProcs, "client-gomaxprocs", 2, "GOMAXPROCS of each load-client process (0: the Go default)")
	fs.DurationVar(&c.serverSlack, "server-timer-slack", defaultServerSlack, "timer slack (prctl PR_SET_TIMERSLACK) of each server process: how late the kernel may end a timed sleep (the runtime's sysmon, the server's 5 ms tick) so as to wake it together with others (0: inherited, 50µs by default)")
	fs.DurationVar(&c.clientSlack, "client-timer-slack", defaultClientSlack, "timer slack of each load-client process: a send may go out up to this much after its scheduled time, together with the next ones; the latency counts it (0: inherited)")
	fs.StringVar(&c.serverFlags, "server-flags", defaultServerFlags, "server `flags`, space-separated; -listen, -admin and -log-format are million's")
	fs.StringVar(&c.clientFlags, "client-flags", defaultClientFlags, "more load-client `flags`, space-separated; -server, -admin, -users, -total-users, -qps, -duration, -connect-rate, -source, -control, -report and -timeline are million's")
	fs.IntVar(&c.startJobs, "start-jobs", 4, "servers started at a time")
	fs.StringVar(&c.bin, "bin", "bin", "`dir` holding the server and loadclient binaries (make build)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the run into `dir`/million-<time>/")
	fs.Float64Var(&c.headroom, "max-mem-share", 0.8, "refuse to start when the memory estimate is above this `share` of MemAvailable")
	fs.Usage = func() { usage(fs) }
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var errs []error
	if c.servers == 0 && c.perServer > 0 {
		c.servers = (c.conns + c.perServer - 1) / c.perServer
	}
	if c.rampTimeout == 0 && c.rampRate > 0 {
		c.rampTimeout = 5*time.Duration(c.conns)*time.Second/time.Duration(c.rampRate) + time.Minute
	}
	return c, errors.Join(append(errs, c.validate())...)
}

func (c *config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.perServer < 2 {
		bad("-per-server=%d: want at least 2", c.perServer)
	}
	if c.servers < 1 {
		bad("-servers=%d: want at least 1", c.servers)
	} else if c.conns < 2*c.servers || c.conns/c.servers < c.recipients+1 {
		bad("-conns=%d over %d servers: want more than %d users per server (a send campaign picks %d online users of one SET)", c.conns, c.servers, c.recipients, c.recipients)
	}
	if c.qps < 1 {
		bad("-qps=%d: want at least 1", c.qps)
	}
	if c.duration < 5*time.Second || c.duration%time.Second != 0 {
		bad("-duration=%v: want whole seconds, at least 5s", c.duration)
	}
	if c.shakeRate < 0 || c.sendRate < 0 {
		bad("-shake-rate=%d, -send-rate=%d: want 0 (off) or more", c.shakeRate, c.sendRate)
	}
	if c.recipients < 1 || c.recipients > 100 {
		bad("-recipients=%d: want 1..100 (the server's default -max-shares)", c.recipients)
	}
	if c.rampRate < c.servers {
		bad("-ramp-rate=%d: want at least one connect a second per load client (%d)", c.rampRate, c.servers)
	}
	if c.rampTimeout < time.Second {
		bad("-ramp-timeout=%v: want at least 1s", c.rampTimeout)
	}
	if c.hold < 0 {
		bad("-hold=%v is negative", c.hold)
	}
	if c.source != "auto" && c.source != "" {
		if _, err := harness.ParseLoopbackSources(c.source); err != nil {
			bad("%v", err)
		}
	}
	if c.serverProcs < 0 || c.clientProcs < 0 {
		bad("-server-gomaxprocs=%d, -client-gomaxprocs=%d: want 0 or more", c.serverProcs, c.clientProcs)
	}
	if c.serverSlack < 0 || c.clientSlack < 0 || c.serverSlack > time.Second || c.clientSlack > time.Second {
		bad("-server-timer-slack=%v, -client-timer-slack=%v: want 0..1s", c.serverSlack, c.clientSlack)
	}
	if c.startJobs < 1 {
		bad("-start-jobs=%d: want at least 1", c.startJobs)
	}
	if c.headroom <= 0 || c.headroom > 1 {
		bad("-max-mem-share=%v: want a share in (0, 1]", c.headroom)
	}
	for _, f := range strings.Fields(c.clientFlags) {
		switch strings.TrimLeft(strings.SplitN(f, "=", 2)[0], "-") {
		case "server", "admin", "users", "total-users", "qps", "phases", "duration", "connect-rate", "source", "control", "report", "timeline", "procs":
			bad("-client-flags: %s is million's to set", f)
		}
	}
	return errors.Join(errs...)
}

func usage(fs *flag.FlagSet) {
	fmt.Fprint(fs.Output(), `usage: million [flags]

A million connections on one host whose processes may each open only 20,000 files:

  1. -servers bin/server processes (default ⌈conns / per-server⌉ = 56), each on its own
     127.0.0.1 port with its own admin port, GOMAXPROCS=-server-gomaxprocs, -server-flags,
     timer slack -server-timer-slack (prctl PR_SET_TIMERSLACK, inherited at fork).
  2. One bin/loadclient per server: a contiguous share of users 1..conns (-users A-B
     -total-users conns: the shared open-loop schedule), -server and -admin of its own
     server only, its own -source addresses, -connect-rate its share of -ramp-rate,
     -qps 0 until the load, timer slack -client-timer-slack; a progress line a second
     until every server has all of its users logged in (the ramp), then -hold idle.
  3. Memory after the ramp: /proc/meminfo (MemAvailable, Slab, SUnreclaim),
     /proc/net/sockstat, /proc/slabinfo, then each server's VmRSS and Go heap (after a GC)
     and each load client's VmRSS.
  4. The load: GET /qps?set=QPS on every load client's -control at once (all switch on
     the same whole second), a shake and a send campaign on every server with its share
     of -shake-rate and -send-rate, for -duration; then /qps?set=0.
  5. Memory again, then SIGTERM to the load clients: each drains and reconciles with its
     own server's /stats (strict) and writes its report; million checks every server's
     ledger and the sums, stops the servers (SIGTERM, exit 0 expected), writes
     report.md, summary.json, servers.csv, clients.csv and system.csv into
     -out/million-<time>/ and prints the summary.

Every process it starts dies with it (Pdeathsig), on an error or Ctrl-C it kills them
all, and the run is bounded by -ramp-timeout + -hold + -duration + 6 minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.

Flags:
`)
	fs.PrintDefaults()
}

func main() {
	bound := func(c config) time.Duration { return c.rampTimeout + c.hold + c.duration + 6*time.Minute }
	harness.Main("million", parseFlags, bound, func(ctx context.Context, c config) error {
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
