// Command connmem measures what an idle logged-in connection costs the
// server: it starts the server binary once per ingress mode, reads its
// memory, logs in -conns connections from this process (plain syscalls, so
// the client side adds nothing but descriptors), waits until the server's
// /stats counts them all, reads its memory again and prints the difference
// per connection: RSS, Go heap + stacks, and the kernel's slab (both ends of
// each loopback connection live in this one kernel).
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
	conns   int
	modes   []string
	sources []netip.Addr
	workers int
	settle  time.Duration
	warm    bool
	bin     string
	out     string
	server  string
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
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: connmem [flags]

For each -ingress mode, starts bin/server on 127.0.0.1 with its default flags
(and -server-flags), warms its rings (-warm), measures it idle, opens -conns
logged-in connections, waits for /stats connections == conns, measures again,
closes them, measures a third time and stops the server with SIGTERM.

A measurement reads the kernel's Slab (/proc/meminfo), TCP sockets
(/proc/net/sockstat) and slab caches (/proc/slabinfo, root only), then collects
garbage in the server (GET /debug/pprof/heap?gc=1) and reads its VmRSS
(/proc/PID/status) and go_memstats_heap_inuse_bytes +
go_memstats_stack_inuse_bytes (/metrics). It prints a Markdown table of the
deltas per connection and keeps the server's heap profile with the connections
up (heap-MODE.pb.gz).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var errs []error
	if c.conns < 1 {
		errs = append(errs, fmt.Errorf("-conns=%d: want at least 1", c.conns))
	}
	var err error
	c.modes, c.sources, err = harness.ParseModesSources(modes, sources)
	errs = append(errs, err)
	if c.workers < 1 || c.workers > 64 {
		errs = append(errs, fmt.Errorf("-workers=%d: want 1..64", c.workers))
	}
	if c.settle < 0 {
		errs = append(errs, fmt.Errorf("-settle=%v: negative", c.settle))
	}
	return c, errors.Join(errs...)
}

func main() { harness.Main("connmem", parseFlags, nil, run) }
