// Command connmem measures what an idle logged-in connection costs the
// server, per ingress mode: RSS, Go heap + stacks and the kernel's slab,
// with the connections held by this process on plain syscalls, so that the
// client side adds nothing but descriptors. -help lists the flags.
package main

import (
	"flag"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

type config struct {
	conns, workers   int
	modes            []string
	sources          []netip.Addr
	settle           time.Duration
	warm             bool
	bin, out, server string
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	var modes, sources string
	fs.IntVar(&c.conns, "conns", 19000, "idle logged-in connections to open (`n`); this process holds them all, so n plus a few must fit its open-files limit, and so must the server's")
	fs.StringVar(&modes, "ingress", "epoll,netpoll", "server -ingress `modes` to measure, comma-separated, one server at a time")
	fs.StringVar(&sources, "source", "127.0.0.2-127.0.0.9", "local `addresses` to connect from, round-robin by user (loadclient -source syntax)")
	fs.IntVar(&c.workers, "workers", 4, "connections logging in at a time")
	fs.BoolVar(&c.warm, "warm", true, "before the idle reading, pass 2 events per slot through every ring (PINGs from 64 other users; sized for the default -sets and -ring), so that the rings' first-touch pages do not count as per-connection RSS")
	fs.DurationVar(&c.settle, "settle", 2*time.Second, "wait this long before each reading, so that the server is idle")
	fs.StringVar(&c.bin, "bin", "bin", "`dir` holding the server binary (make build)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the table and the server logs into `dir`/connmem-<time>/")
	fs.StringVar(&c.server, "server-flags", "", "more server `flags`, space-separated")
	harness.Usage(fs, `For each -ingress mode: bin/server with its rings warmed (-warm), read idle, -conns
logged-in connections of this process, read again, closed, read a third time. A reading is
the kernel's Slab, sockets and slab caches, then after a forced GC the server's VmRSS and
heap + stacks. It prints a Markdown table of the deltas per connection and keeps the heap
profile with the connections up (heap-MODE.pb.gz).
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.If(c.conns < 1, "-conns=%d: want at least 1", c.conns)
	var err error
	c.modes, c.sources, err = harness.ParseModesSources(modes, sources)
	bad.Add(err)
	bad.If(c.workers < 1 || c.workers > 64, "-workers=%d: want 1..64", c.workers)
	bad.If(c.settle < 0, "-settle=%v: negative", c.settle)
	return c, bad.Err()
}

func main() { harness.Main("connmem", parseFlags, nil, run) }
