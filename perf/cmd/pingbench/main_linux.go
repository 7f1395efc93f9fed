// Command pingbench measures PING round trips a second through the server,
// epoll against netpoll ingress: -conns connections of its own, each
// keeping -inflight PINGs outstanding in a closed loop on lean epoll loops,
// so that the client is not what limits the figure. -help lists the flags.
package main

import (
	"flag"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

type config struct {
	conns, inflight, loops, count int
	duration, warmup              time.Duration
	modes                         []string
	sources                       []netip.Addr
	bin, out, server              string
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
	harness.Usage(fs, `-count times for each -ingress mode in turn: bin/server, -conns logged-in connections, the
closed PING loop for -warmup then -duration, every PONG checked, SIGTERM → exit 0. A Markdown
table of each mode's median run: round trips a second, latency from the PING's write to its
PONG, CPU of the server (/proc/PID/stat), this client (getrusage) and the rest of the machine.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.If(c.conns < 1 || c.conns > 19000, "-conns=%d: want 1..19000 (the open-files limit of 20,000 per process)", c.conns)
	bad.If(c.inflight < 1 || c.inflight > maxInflight, "-inflight=%d: want 1..%d", c.inflight, maxInflight)
	bad.If(c.duration <= 0 || c.duration > 10*time.Minute, "-duration=%v: want more than 0 and at most 10m", c.duration)
	bad.If(c.warmup < 0 || c.warmup > time.Minute, "-warmup=%v: want 0..1m", c.warmup)
	bad.If(c.count < 1 || c.count > 100, "-count=%d: want 1..100", c.count)
	bad.If(c.loops < 1 || c.loops > 64 || c.loops > c.conns, "-loops=%d: want 1..64 and at most -conns", c.loops)
	var err error
	c.modes, c.sources, err = harness.ParseModesSources(modes, sources)
	bad.Add(err)
	return c, bad.Err()
}

func main() { harness.Main("pingbench", parseFlags, nil, run) }
