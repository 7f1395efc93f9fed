// Command demo is `make demo`: it starts the server on loopback, starts a
// shake and a send campaign through the admin API once the users are
// logged in, drives the server with the load client, prints the client's
// summary and reconciliation and its own check of the server's ledger,
// stops the server with SIGTERM and says where the files are. It exits 1
// when anything failed: the client's run or reconciliation, a ledger check,
// or a server that did not exit 0.
//
// Run it from the module root after make build; -help lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"hongbao/loadclient"

	"hongbao/perf/internal/harness"
)

// config is one demo run.
type config struct {
	users    int
	qps      int
	duration time.Duration
	source   string
	ingress  string
	shake    int // shake campaign: envelopes a second
	send     int // send campaign: envelopes a second
	recips   int
	bin      string
	out      string
	server   string // more server flags, space-separated
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{duration: 30 * time.Second}
	fs.IntVar(&c.users, "users", 10000, "users 1..`N`, each its own connection (the load client's -users 1-N)")
	fs.IntVar(&c.qps, "qps", 10000, "SHAKEs a second of all users together (the load client's -qps)")
	fs.Func("duration", "how long the load client sends, `d`: a Go duration, or whole seconds (default 30s)", func(s string) error {
		d, err := harness.ParseDuration(s)
		c.duration = d
		return err
	})
	fs.StringVar(&c.source, "source", "127.0.0.2-127.0.0.9", "the load client's -source `addresses` (several, so that no source runs out of ports); empty: the kernel's choice")
	fs.StringVar(&c.ingress, "ingress", "epoll", "the server's -ingress: epoll or netpoll")
	fs.IntVar(&c.shake, "shake-rate", 200, "shake campaign: envelopes a second, amounts 1..200 fen")
	fs.IntVar(&c.send, "send-rate", 200, "send campaign: group envelopes a second, totals 3..2000 fen")
	fs.IntVar(&c.recips, "recipients", 3, "send campaign: recipients of each envelope")
	fs.StringVar(&c.bin, "bin", "bin", "`dir` holding the server and loadclient binaries (make build)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the run's files into `dir`/demo-<time>/")
	fs.StringVar(&c.server, "server-flags", "", "more server `flags`, space-separated (e.g. \"-sets 8 -wait yield\"); -listen, -admin and -log-format are the demo's")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: demo [flags]

Starts bin/server on 127.0.0.1 (kernel-chosen ports), runs bin/loadclient against it
with -admin (strict reconciliation), starts a shake campaign
(POST /campaigns/shake?rate=R&total=T&min=1&max=200) and a send campaign
(POST /campaigns/send?rate=R&total=T&recipients=K&min=K&max=2000) once the users are
logged in, sized to end 3 s before the load does, then checks the server's ledger,
stops the server with SIGTERM and expects exit status 0. Every process it starts
stops by itself: the whole run is bounded by -duration plus three minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var errs []error
	if c.users < 2 {
		errs = append(errs, fmt.Errorf("-users=%d: want at least 2", c.users))
	}
	if c.users < c.recips+1 {
		errs = append(errs, fmt.Errorf("-users=%d: a send campaign of %d recipients wants more users", c.users, c.recips))
	}
	if c.qps < 0 {
		errs = append(errs, fmt.Errorf("-qps=%d: want 0 or more", c.qps))
	}
	if c.duration < 5*time.Second {
		errs = append(errs, fmt.Errorf("-duration=%v: want at least 5s (campaigns start once the users are in)", c.duration))
	}
	if c.source != "" {
		if _, err := loadclient.ParseSources(c.source); err != nil {
			errs = append(errs, fmt.Errorf("-source: %w", err))
		}
	}
	if c.ingress != "epoll" && c.ingress != "netpoll" {
		errs = append(errs, fmt.Errorf("-ingress=%q: want epoll or netpoll", c.ingress))
	}
	if c.shake < 1 || c.send < 1 {
		errs = append(errs, fmt.Errorf("-shake-rate=%d, -send-rate=%d: want at least 1 each", c.shake, c.send))
	}
	if c.recips < 1 || c.recips > 100 {
		errs = append(errs, fmt.Errorf("-recipients=%d: want 1..100 (the server's default -max-shares)", c.recips))
	}
	return c, errors.Join(errs...)
}

func main() {
	// Bounded whatever happens: the load, its ramp and grace, and the checks.
	bound := func(c config) time.Duration { return c.duration + 3*time.Minute }
	harness.Main("demo", parseFlags, bound, func(ctx context.Context, c config) error {
		return run(ctx, c, os.Stdout, os.Stderr)
	})
}
