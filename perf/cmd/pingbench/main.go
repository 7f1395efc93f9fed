// Command pingbench measures PING round trips a second through the server:
// -conns logged-in connections, each keeping -inflight PINGs outstanding
// (closed loop: every PONG sends the next PING at once) for -duration after
// a warm-up. It runs the server once per -ingress mode with the same flags
// and prints round trips a second, latency percentiles and the CPU time of
// the server and of this client over the measured window.
//
// The client is lean so that it is not what limits the figure: -loops
// goroutines (default 1), each an epoll loop over its share of the
// connections with golang.org/x/sys/unix, one read and one write per
// connection per round, no allocation per frame.
//
// Run it from the module root after make build; -help lists the flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"hongbao/perf/internal/harness"
)

type config struct {
	conns    int
	inflight int
	duration time.Duration
	warmup   time.Duration
	loops    int
	count    int
	modes    []string
	sources  []netip.Addr
	bin      string
	out      string
	server   string
}

// maxInflight keeps a connection's PINGs within one write to an empty
// socket buffer: the client never has to queue output.
const maxInflight = 1024

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	var modes, sources string
	fs.IntVar(&c.conns, "conns", 1000, "logged-in connections (`n`)")
	fs.IntVar(&c.inflight, "inflight", 1, "PINGs each connection keeps outstanding (`k`), closed loop")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "the measured window")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "PINGs before the window, not counted")
	fs.IntVar(&c.loops, "loops", 1, "client epoll loops (goroutines), each with its share of the connections")
	fs.IntVar(&c.count, "count", 3, "runs of each mode, interleaved (epoll, netpoll, epoll, …) so that a noisy neighbour hits both alike; the table shows the median run and the range")
	fs.StringVar(&modes, "ingress", "epoll,netpoll", "server -ingress `modes` to compare, comma-separated, one server at a time")
	fs.StringVar(&sources, "source", "127.0.0.2-127.0.0.9", "local `addresses` to connect from, round-robin (loadclient -source syntax)")
	fs.StringVar(&c.bin, "bin", "bin", "`dir` holding the server binary (make build)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the table and the server logs into `dir`/pingbench-<time>/")
	fs.StringVar(&c.server, "server-flags", "", "more server `flags`, space-separated, the same for every mode")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: pingbench [flags]

-count times, for each -ingress mode in turn, starts bin/server on 127.0.0.1 with
its default flags (and -server-flags), logs in -conns connections, runs the closed
PING loop for -warmup and then -duration, checks that every PING got its PONG and
stops the server with SIGTERM, expecting exit status 0. Then it prints a Markdown
table of each mode's median run by round trips a second, with the range over the
runs: round trips a second, PING latency (from the PING's write to its PONG's
read), and CPU over the window from /proc/PID/stat for the server and getrusage
for this client. Run nothing else heavy at the same time: client and server share
the machine's cores.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var errs []error
	if c.conns < 1 || c.conns > 19000 {
		errs = append(errs, fmt.Errorf("-conns=%d: want 1..19000 (the open-files limit of 20,000 per process)", c.conns))
	}
	if c.inflight < 1 || c.inflight > maxInflight {
		errs = append(errs, fmt.Errorf("-inflight=%d: want 1..%d", c.inflight, maxInflight))
	}
	if c.duration <= 0 || c.duration > 10*time.Minute {
		errs = append(errs, fmt.Errorf("-duration=%v: want more than 0 and at most 10m", c.duration))
	}
	if c.warmup < 0 || c.warmup > time.Minute {
		errs = append(errs, fmt.Errorf("-warmup=%v: want 0..1m", c.warmup))
	}
	if c.count < 1 || c.count > 100 {
		errs = append(errs, fmt.Errorf("-count=%d: want 1..100", c.count))
	}
	if c.loops < 1 || c.loops > 64 || c.loops > c.conns {
		errs = append(errs, fmt.Errorf("-loops=%d: want 1..64 and at most -conns", c.loops))
	}
	var err error
	c.modes, c.sources, err = harness.ParseModesSources(modes, sources)
	errs = append(errs, err)
	return c, errors.Join(errs...)
}

func main() { harness.Main("pingbench", parseFlags, nil, run) }
