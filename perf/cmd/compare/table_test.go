package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

func testConfig() *config {
	return &config{users: 100, qps: 30000, highQPS: 60000, highDur: 20 * time.Second, maxP99: 10 * time.Millisecond,
		variants: []variant{byName("ring"), byName("bare"), byName("netpoll")}}
}

func byName(name string) variant {
	for _, v := range variants {
		if v.name == name {
			return v
		}
	}
	panic("no variant " + name)
}

// row returns the cells of the first row of g whose first cell is name.
func row(t *testing.T, g *harness.Table, name string) []string {
	t.Helper()
	for _, r := range g.Rows {
		if strings.HasPrefix(r[0], name) {
			return r
		}
	}
	t.Fatalf("no row %q in\n%s", name, g.Text())
	return nil
}

func TestTableRatiosAndTargets(t *testing.T) {
	all := []*measurement{
		{Variant: "ring", Phase: phaseEfficiency, Target: 30000, Answered: 29900, ServerUS: 11.5, ClientUS: 9, Allocs: 0.02, P99: 2, ConnRSS: 400, IdleCPU: 0.01, IdleRSS: 20e6, Reconc: "ok"},
		{Variant: "bare", Phase: phaseEfficiency, Target: 30000, Answered: 30000, ServerUS: 10, ClientUS: 9, P99: 1, ConnRSS: 300, Reconc: "off"},
		{Variant: "netpoll", Phase: phaseEfficiency, Target: 30000, Answered: 30000, ServerUS: 23, P99: 3, ConnRSS: 10000, IdleCPU: 0.02, Reconc: "ok"},
		{Variant: "ring", Phase: phaseLatency, Target: 60000, Answered: 60000, P99: 6, P999: 30, WorstS: 20, LowS: 0.85, Reconc: "ok"},
		{Variant: "bare", Phase: phaseLatency, Target: 60000, Answered: 60000, P99: 3, P999: 5, WorstS: 4, LowS: 0.98, Reconc: "off"},
		{Variant: "netpoll", Phase: phaseLatency, Target: 60000, Err: "load client: exit status 1"},
		{Variant: "ring", Phase: phaseStep, Target: 70000, Answered: 69000, P99: 12, Reconc: "MISMATCH: x"},
		{Variant: "bare", Phase: phaseStep, Target: 70000, Answered: 70000, P99: 8, Reconc: "off"},
	}
	tb := buildTable(testConfig(), all)
	if r := row(t, tb.ratios(), "netpoll"); r[1] != "2.00×" || r[5] != "2.00×" {
		t.Errorf("netpoll ratios %q: want CPU 2.00× and idle 2.00× of ring's", r)
	}
	if r := row(t, tb.ratios(), "bare"); r[3] != "1.17×" { // 70000 / 60000
		t.Errorf("bare max QPS ratio %q: want 1.17× (70,000 vs ring's 60,000: its 70k step had p99 12 ms)", r[3])
	}
	fig := tb.figures()
	for name, money := range map[string]string{"ring": "MISMATCH", "bare": "off", "netpoll": "failed run"} {
		if r := row(t, fig, name); r[len(r)-1] != money {
			t.Errorf("%s money %q, want %q", name, r[len(r)-1], money)
		}
	}
	verdicts := map[string]string{
		"server CPU per SHAKE": "met", // 1.15×
		"highest rate":         "MISSED",
		"p99 @60000 ≤ 1.5×":    "MISSED", // 2×
		"p99 @60000 ≤ 10 ms":   "met",
		"no second under 90 %": "MISSED", // 85 % where bare's lowest was 98 %
		"p99.9":                "MISSED",
		"no second over":       "met",
		"allocations":          "met",
		"load client":          "met",
		"server RSS per":       "met",
		"idle server RSS":      "met",
	}
	tg := tb.targets()
	for prefix, want := range verdicts {
		if r := row(t, tg, prefix); r[2] != want {
			t.Errorf("target %q: %q, want %s", r[0], r[2], want)
		}
	}
	if len(tg.Rows) != len(verdicts) {
		t.Errorf("%d targets, want %d:\n%s", len(tg.Rows), len(verdicts), tg.Text())
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-variants", "ring,nope"},
		{"-steps", "70000,x"},
		{"-ramp", "1500ms"},
		{"-users", "0"},
		{"extra"},
	} {
		if _, err := parseFlags(newFlagSet(), args); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
	c, err := parseFlags(newFlagSet(), []string{"-variants", "bare,ring", "-steps", ""})
	if err != nil || len(c.variants) != 2 || c.variants[0].name != "bare" || c.steps != nil {
		t.Errorf("parseFlags: %+v, %v", c, err)
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// Where the efficiency phase and the latency rounds share a rate, the
// median round says whether the rate held, not the one efficiency
// measurement: a lucky efficiency phase does not hold a rate whose rounds
// did not, nor an unlucky one lose a rate they held.
func TestHeldByRounds(t *testing.T) {
	cfg := testConfig()
	cfg.qps = cfg.highQPS
	at := func(phase string, p99 float64) *measurement {
		return &measurement{Variant: "ring", Phase: phase, Target: cfg.qps, Answered: float64(cfg.qps), P99: p99, Reconc: "ok"}
	}
	for _, c := range []struct {
		eff, r1, r2, r3 float64
		want            float64
	}{
		{eff: 9, r1: 12, r2: 13, r3: 8, want: 0},
		{eff: 14, r1: 12, r2: 9, r3: 8, want: float64(cfg.qps)},
	} {
		all := []*measurement{at(phaseEfficiency, c.eff), at(phaseLatency, c.r1), at(phaseLatency, c.r2), at(phaseLatency, c.r3)}
		if got := buildTable(cfg, all).byVar["ring"].maxQPS; got != c.want {
			t.Errorf("efficiency p99 %v ms, rounds %v, %v, %v ms: highest rate held %.0f; want %.0f", c.eff, c.r1, c.r2, c.r3, got, c.want)
		}
	}
}

// With several latency rounds a variant's figure is the round with the
// median p99, and only that round counts for the highest rate held.
func TestLatencyRoundsMedian(t *testing.T) {
	all := []*measurement{
		{Variant: "ring", Phase: phaseEfficiency, Target: 30000, Answered: 30000, ServerUS: 10, P99: 2, Reconc: "ok"},
		{Variant: "ring", Phase: phaseLatency, Target: 60000, Answered: 60000, P99: 5, WorstS: 9, LowS: 1, Reconc: "ok"},
		{Variant: "ring", Phase: phaseLatency, Target: 60000, Answered: 60000, P99: 30, WorstS: 80, LowS: 0.5, Reconc: "ok"},
		{Variant: "ring", Phase: phaseLatency, Target: 60000, Answered: 60000, P99: 12, WorstS: 14, LowS: 0.89, ServerWait: 0.85, ClientWait: 1.4, Reconc: "ok"},
		{Variant: "ring", Phase: phaseLatency, Target: 60000, Err: "failed"},
	}
	tb := buildTable(testConfig(), all)
	s := tb.byVar["ring"]
	if s.lat == nil || s.lat.P99 != 12 {
		t.Fatalf("latency figure %+v; want the round with the median p99, 12 ms", s.lat)
	}
	if s.maxQPS != 30000 {
		t.Errorf("highest rate held %.0f; want 30000: the median round (12 ms) is over 10 ms, a lucky 5 ms round does not count", s.maxQPS)
	}
	r := s.rounds
	if r.n != 3 || r.p99Min != 5 || r.p99Max != 30 {
		t.Errorf("rounds %+v; want 3 rounds, 5–30 ms", r)
	}
	if r.worstS != 80 || r.lowS != 0.5 {
		t.Errorf("worst second %v ms, lowest second %v; want 80 ms and 0.5: the worst of every round, not the median round's", r.worstS, r.lowS)
	}
	if r.stalled != 2 {
		t.Errorf("%d rounds with a second under 90 %%; want 2 (50 %% and 89 %%; not 100 %%, nor the failed round)", r.stalled)
	}
	fig := row(t, tb.figures(), "ring")
	if !slices.Contains(fig, "50 % (2)") || !slices.Contains(fig, "0.85; 1.40") || !slices.Contains(fig, "5.00–30.00 (3)") {
		t.Errorf("ring figures %q; want the lowest second with its count of stalled rounds, 50 %% (2), and the median round's CPU waits, 0.85; 1.40", fig)
	}
	if slices.Contains(row(t, tb.figures(), "bare"), "––") {
		t.Errorf("bare figures %q: a variant without rounds shows one – a cell", row(t, tb.figures(), "bare"))
	}
	if w := cpuWaits(&measurement{ServerWait: -1, ClientWait: 0.5}); w != "–" {
		t.Errorf("CPU waits not measured: %q, want –", w)
	}
	if m := medianLatency(all[1:3]); m.P99 != 5 {
		t.Errorf("median of two rounds (5, 30 ms): %v; want the lower, 5", m.P99)
	}
}

// TestCPUOverRounds: with the latency rounds at the efficiency phase's rate,
// server CPU per SHAKE is the median of all those measurements, so one noisy
// phase does not decide the CPU target.
func TestCPUOverRounds(t *testing.T) {
	cfg := testConfig()
	cfg.highQPS = cfg.qps
	cfg.variants = []variant{byName("ring"), byName("bare")}
	m := func(v, phase string, us float64) *measurement {
		return &measurement{Variant: v, Phase: phase, Target: cfg.qps, Answered: float64(cfg.qps), ServerUS: us, P99: 1, Reconc: "ok"}
	}
	all := []*measurement{
		m("ring", phaseEfficiency, 30), m("bare", phaseEfficiency, 10),
		m("ring", phaseLatency, 10), m("bare", phaseLatency, 11),
		m("ring", phaseLatency, 12), m("bare", phaseLatency, 12),
		m("ring", phaseLatency, 14), m("bare", phaseLatency, 9),
		{Variant: "ring", Phase: phaseStep, Target: 70000, ServerUS: 99, Reconc: "ok"}, // another rate: not counted
	}
	tb := buildTable(cfg, all)
	if s := tb.byVar["ring"]; s.cpuUS != 13 || s.cpuN != 4 { // (12+14)/2
		t.Errorf("ring CPU %v µs of %d; want the median 13 µs of 4", s.cpuUS, s.cpuN)
	}
	if s := tb.byVar["bare"]; s.cpuUS != 10.5 || s.cpuN != 4 {
		t.Errorf("bare CPU %v µs of %d; want the median 10.5 µs of 4", s.cpuUS, s.cpuN)
	}
	if r := row(t, tb.targets(), "server CPU per SHAKE"); r[2] != "MISSED" || !strings.Contains(r[1], "1.24× (medians of 4 and 4)") {
		t.Errorf("CPU target %q; want 1.24× MISSED", r)
	}
}
