package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// variant is one server configuration under comparison.
type variant struct {
	name  string
	flags []string // server flags beyond the defaults
	what  string
}

// variants are every ablation, the default pipeline first: the ratios are
// taken against it.
var variants = []variant{
	{"ring", nil, "the default: epoll ingress, our ring with a SET's stages fused on one goroutine, one write per connection per batch, money answers after the journal's fsync"},
	{"bare", []string{"-pipeline=none"}, "bare I/O: the ingress answers every SHAKE itself (status 0), no ring, no stages"},
	{"handoff", []string{"-handoff"}, "every request wakes its SET's goroutine, which the loop yields to, instead of the loop running the SET's batch itself when the SET is idle"},
	{"netpollwait", []string{"-loop-wait=netpoller"}, "an idle epoll loop parks in Go's netpoller on its epoll descriptor instead of blocking in a raw epoll_wait that keeps its P"},
	{"pipelined", []string{"-stages=pipelined"}, "a goroutine per stage, parking and waking one another, instead of one per SET running the four in turn"},
	{"netpoll", []string{"-ingress=netpoll"}, "a goroutine per connection on Go's netpoller instead of the epoll loops"},
	{"disruptor", []string{"-pipeline=disruptor"}, "github.com/smarty/go-disruptor v0.5.0 between the same stage handlers"},
	{"chan", []string{"-pipeline=chan"}, "a buffered channel and a goroutine per stage, the same handlers"},
	{"frame", []string{"-egress=frame"}, "egress writes every frame with its own write() instead of one per connection per batch"},
	{"unpaced", []string{"-journal-round=-1ns"}, "journal rounds back to back: a round starts as soon as the last is durable, instead of at least 1 ms after the last began"},
	{"nojournal", []string{"-journal=off"}, "nothing made durable: money answers leave without waiting for the journal's fsync (what durability costs)"},
	{"noshed", []string{"-shed-delay=-1ns"}, "no shedding by delay: requests that waited long in the kernel are served late, never refused (bare I/O does not shed either)"},
	{"flightrec", []string{"-trace-slow=1h"}, "Go's flight recorder kept running, as -trace-slow does (with a bound no answer reaches: no file written): what the runtime trace costs"},
}

func names(vs []variant) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.name)
	}
	return strings.Join(s, ", ")
}

// config is one comparison run.
type config struct {
	users     int
	ramp      time.Duration // QPS 0 while the users connect, before each measurement
	idle      time.Duration // idle CPU and memory, before the first measurement of a variant
	qps       int           // the efficiency phase: server CPU per SHAKE
	qpsDur    time.Duration
	highQPS   int // the latency phase
	highDur   time.Duration
	repeat    int   // rounds of the latency phase
	steps     []int // the throughput search: higher rates, until p99 passes maxP99
	stepDur   time.Duration
	maxP99    time.Duration
	shakeRate int
	variants  []variant
	noise     int           // goroutines of compare busy in bursts beside every measurement
	noiseBusy time.Duration // each busy this long of every noisePeriod

	harness.RunFlags
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	c := config{}
	var list, steps string
	fs.IntVar(&c.users, "users", 19000, "users 1..`N`, each its own connection (N plus a margin must fit the open-files limit, 20,000 here)")
	fs.DurationVar(&c.ramp, "ramp", 5*time.Second, "before each measurement: QPS 0 while the users connect and log in")
	fs.DurationVar(&c.idle, "idle", 5*time.Second, "the server's idle CPU is measured over this long, with no client, before its first measurement")
	fs.IntVar(&c.qps, "qps", 30000, "efficiency phase: SHAKEs a second (`rate`); server CPU per answered SHAKE is measured here (the median of it and the latency rounds when -high-qps is the same rate)")
	fs.DurationVar(&c.qpsDur, "qps-duration", 15*time.Second, "length of the efficiency phase")
	fs.IntVar(&c.highQPS, "high-qps", 60000, "latency phase: SHAKEs a second (`rate`); p99, p99.9 and the worst second's p99")
	fs.DurationVar(&c.highDur, "high-duration", 20*time.Second, "length of the latency phase")
	fs.IntVar(&c.repeat, "repeat", 5, "rounds of the latency phase, the variants interleaved in each; each variant's p99 and p99.9 are its round with the median p99, its worst second and lowest second the worst of all rounds, and the spread the range of its round p99s (one round ranks noise on two cores: a tail needs several)")
	fs.StringVar(&steps, "steps", "70000,80000,90000,100000", "throughput search: comma-separated `rates` tried in order after the latency phase by the variants that held it (p99 ≤ -max-p99, 90 % of the rate answered), each until the first rate it does not hold (empty: no search)")
	fs.DurationVar(&c.stepDur, "step-duration", 10*time.Second, "length of each throughput step")
	fs.DurationVar(&c.maxP99, "max-p99", 10*time.Millisecond, "the throughput search's limit: the highest rate answered with p99 at most this")
	fs.IntVar(&c.shakeRate, "shake-rate", 200, "shake campaign during every measurement (not in bare mode, which has no stages): envelopes a second, 1..200 fen")
	fs.StringVar(&list, "variants", strings.ReplaceAll(names(variants), " ", ""), "comma-separated `variants` to compare, from: "+names(variants))
	c.RunFlags.Add(fs, "compare", "compare-")
	fs.IntVar(&c.noise, "noise", 0, "`goroutines` of this process kept busy for -noise-busy of every 100 ms during the whole run, each on a core\n"+
		"when it can: CPU taken in bursts as by the other tenants of a shared machine, the same for every variant (0: none)")
	fs.DurationVar(&c.noiseBusy, "noise-busy", 30*time.Millisecond, "-noise: how long of every 100 ms each goroutine is busy")
	var about strings.Builder
	about.WriteString(`Runs the same load against each server variant and prints one table of ratios.
For each phase (efficiency, latency, then the throughput steps) and each variant:

  bin/server -listen 127.0.0.1:0 -admin 127.0.0.1:0 -log-format json VARIANT-FLAGS
  curl -XPOST 'ADMIN/campaigns/shake?rate=200&total=…&min=1&max=200'     # not in bare mode
  bin/loadclient -server … -users 1-N -phases 0@RAMP,QPS@DURATION -source … -admin ADMIN \
      -report report.json -timeline timeline.csv
  kill -TERM SERVER

while server CPU (utime+stime of /proc/PID/stat), load client CPU and the server's
go_memstats_mallocs_total are read at the start and the end of the measured window
(the QPS phase less its first and last second). Variants:

`)
	for _, v := range variants {
		fmt.Fprintf(&about, "  %-11s %-22s %s\n", v.name, strings.Join(v.flags, " "), v.what)
	}
	harness.Usage(fs, about.String())
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	for _, n := range strings.Split(list, ",") {
		i := slices.IndexFunc(variants, func(v variant) bool { return v.name == strings.TrimSpace(n) })
		if bad.If(i < 0, "-variants: unknown variant %q (want some of %s)", n, names(variants)); i >= 0 {
			c.variants = append(c.variants, variants[i])
		}
	}
	if steps != "" {
		for _, s := range strings.Split(steps, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				bad.Add(fmt.Errorf("-steps: %q is not a positive rate", s))
				continue
			}
			c.steps = append(c.steps, n)
		}
	}
	bad.Add(c.RunFlags.Validate(c.users, 1))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ramp", c.ramp}, {"qps-duration", c.qpsDur}, {"high-duration", c.highDur}, {"step-duration", c.stepDur}} {
		bad.If(d.v < 3*time.Second || d.v%time.Second != 0, "-%s: %v is not a whole number of seconds ≥ 3s", d.name, d.v)
	}
	bad.If(c.repeat < 1, "-repeat: %d is not positive", c.repeat)
	bad.If(c.noise < 0 || c.noiseBusy < 0 || c.noiseBusy > noisePeriod, "-noise %d -noise-busy %v: want goroutines ≥ 0 and a busy time in 0..%v", c.noise, c.noiseBusy, noisePeriod)
	bad.If(c.qps <= 0 || c.highQPS <= 0 || c.shakeRate < 0, "-qps and -high-qps must be positive, -shake-rate not negative")
	return c, bad.Err()
}

// bound is the longest the whole comparison may take: every measurement at
// its length plus a minute of starts, grace and stops each.
func (c config) bound() time.Duration {
	per := c.idle + time.Duration(2+c.repeat)*c.ramp + c.qpsDur + time.Duration(c.repeat)*c.highDur +
		time.Duration(len(c.steps))*(c.ramp+c.stepDur) + time.Duration(1+c.repeat+len(c.steps))*time.Minute
	return time.Duration(len(c.variants)) * per
}
