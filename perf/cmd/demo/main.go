// Command demo is `make demo`: the server on loopback, a shake and a send
// campaign once the users are logged in, the load client with strict
// reconciliation, and demo's own check of the server's ledger. It exits 1
// when anything failed: the client's run or reconciliation, a ledger check,
// or a server that did not exit 0. -help lists the flags.
package main

import (
	"flag"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

type config struct {
	users, qps int
	duration   time.Duration
	ingress    string
	camps      harness.Campaigns
	harness.RunFlags
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.users, "users", 10000, "users 1..`N`, each its own connection (the load client's -users 1-N)")
	fs.IntVar(&c.qps, "qps", 10000, "SHAKEs a second of all users together (the load client's -qps)")
	harness.DurationVar(fs, &c.duration, "duration", 30*time.Second, "how long the load client sends, `d`")
	fs.StringVar(&c.ingress, "ingress", "epoll", "the server's -ingress: epoll or netpoll")
	c.camps.Add(fs, 200, "send-rate", 200)
	c.RunFlags.Add(fs, "demo", "demo-")
	harness.Usage(fs, `Starts bin/server on 127.0.0.1 (kernel-chosen ports) and bin/loadclient against it with
-admin (strict reconciliation), a shake and a send campaign once the users are logged in,
sized to end 3 s before the load; then checks the server's ledger and stops it with SIGTERM,
expecting exit 0. Bounded by -duration plus three minutes.

Exit status: 0 when everything passed, 1 when something failed, 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.Add(c.RunFlags.Validate(c.users, c.camps.Recipients), c.camps.Validate("send-rate"))
	bad.If(c.qps < 0, "-qps=%d: want 0 or more", c.qps)
	bad.If(c.duration < 5*time.Second, "-duration=%v: want at least 5s (campaigns start once the users are in)", c.duration)
	if _, err := harness.ParseModes(c.ingress); err != nil {
		bad.Add(err)
	}
	return c, bad.Err()
}

func main() {
	harness.Main("demo", parseFlags, func(c config) time.Duration { return c.duration + 3*time.Minute }, run)
}
