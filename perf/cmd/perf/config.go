package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// config is one perf run.
type config struct {
	users   int
	qps     int // SHAKEs a second in the steady and the send phase
	highQPS int // in the high phase

	ramp, steady, send, high time.Duration // the phases, back to back

	camps harness.Campaigns // shake: from the steady phase to the end; send: the send phase only

	settle  time.Duration // into the steady phase before the first capture
	cpuProf time.Duration // CPU profile length
	trace   time.Duration // runtime/trace length

	harness.RunFlags // -source, -bin, -out, -server-flags, -client-flags

	given string // the flags the command line set, quoted for a shell: the run again
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	fs.IntVar(&c.users, "users", 19000, "users 1..`N`, each its own connection; the server and the load client each hold N descriptors, so N plus a margin must fit the open-files limit (20,000 here)")
	fs.IntVar(&c.qps, "qps", 30000, "SHAKEs a second (`rate`) in the steady and the send phase")
	fs.IntVar(&c.highQPS, "high-qps", 60000, "SHAKEs a second (`rate`) in the high phase")
	fs.DurationVar(&c.ramp, "ramp", 20*time.Second, "first phase: QPS 0 while the users connect and log in")
	fs.DurationVar(&c.steady, "steady", 60*time.Second, "second phase: -qps with the shake campaign; the profiles are captured in it")
	fs.DurationVar(&c.send, "send", 30*time.Second, "third phase: -qps with the send campaign (system group envelopes) as well")
	fs.DurationVar(&c.high, "high", 30*time.Second, "fourth phase: -high-qps")
	c.camps.Add(fs, 200, "send-rate", 200)
	fs.DurationVar(&c.settle, "settle", 5*time.Second, "how far into the steady phase the captures start")
	fs.DurationVar(&c.cpuProf, "cpu-profile", 20*time.Second, "length of the CPU profile (/debug/pprof/profile?seconds=N)")
	fs.DurationVar(&c.trace, "trace", 2*time.Second, "length of the runtime/trace slice (/debug/pprof/trace?seconds=N)")
	c.RunFlags.Add(fs, "perf", "")
	harness.Usage(fs, `The seed scenario on loopback in four phases (ramp, steady with a shake campaign, send with
a send campaign, high), with GODEBUG=gctrace=1, the server sampled every second, and in the
steady phase its profiles (allocs, CPU, heap, goroutines) and a runtime trace; then flame
graphs, charts and report.html/.md. commands.txt lists every step; cmd/perf/README.md the
files. perf exits 1 only when it could not measure or the server did not exit 0 after
SIGTERM (the load client's verdict is in the report), 2 for a bad command line.
`)
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	c.given = harness.SetFlags(fs)
	return c, c.validate()
}

// validate reports every bad flag, each with its reason.
func (c *config) validate() error {
	var bad harness.Problems
	bad.Add(c.RunFlags.Validate(c.users, c.camps.Recipients), c.camps.Validate("send-rate"))
	bad.If(c.qps < 1 || c.qps > loadclient.MaxQPS || c.highQPS < 1 || c.highQPS > loadclient.MaxQPS, "-qps=%d, -high-qps=%d: want 1..%d each", c.qps, c.highQPS, loadclient.MaxQPS)
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"ramp", c.ramp}, {"steady", c.steady}, {"send", c.send}, {"high", c.high}} {
		bad.If(p.d < time.Second || p.d%time.Second != 0, "-%s=%v: want whole seconds, at least 1s (the load client changes rates on whole seconds)", p.name, p.d)
	}
	bad.If(c.cpuProf < time.Second || c.cpuProf%time.Second != 0 || c.trace < time.Second || c.trace%time.Second != 0, "-cpu-profile=%v, -trace=%v: want whole seconds, at least 1s each", c.cpuProf, c.trace)
	need := c.settle + c.cpuProf + c.trace + captureSlack
	bad.If(c.steady < need, "-steady=%v: the captures need %v (-settle %v + -cpu-profile %v + heap, allocs, goroutines + -trace %v)", c.steady, need, c.settle, c.cpuProf, c.trace)
	return bad.Err()
}

// captureSlack is the steady phase's time for the heap, allocs and
// goroutine captures between the CPU profile and the trace.
const captureSlack = 3 * time.Second

// phase is one phase of the run, in seconds since the load client's start.
type phase struct {
	Name     string
	From, To float64
	QPS      int
}

func (c *config) phases() []phase {
	var out []phase
	at := 0.0
	for _, p := range []struct {
		name string
		d    time.Duration
		qps  int
	}{{"ramp", c.ramp, 0}, {"steady", c.steady, c.qps}, {"send", c.send, c.qps}, {"high", c.high, c.highQPS}} {
		out = append(out, phase{Name: p.name, From: at, To: at + p.d.Seconds(), QPS: p.qps})
		at += p.d.Seconds()
	}
	return out
}

// plan is the load client's -phases.
func (c *config) plan() string {
	var parts []string
	for _, p := range c.phases() {
		parts = append(parts, fmt.Sprintf("%d@%ds", p.QPS, int(p.To-p.From)))
	}
	return strings.Join(parts, ",")
}

// length is the whole run's length.
func (c *config) length() time.Duration { return c.ramp + c.steady + c.send + c.high }
