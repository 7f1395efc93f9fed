package main

import (
	"fmt"
	"strings"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// summary is each variant's figures, gathered from its measurements.
type summary struct {
	v          variant
	eff, lat   *measurement // the efficiency phase, and the latency round with the median p99
	lats       []*measurement
	rounds     rounds  // over every successful latency round
	maxQPS     float64 // the highest answered rate with p99 ≤ -max-p99; 0: none
	maxAt      int     // its target rate
	reconciled string  // ok: every measurement reconciled; off: none could (bare); else what failed
	// Server CPU per SHAKE at -qps: the median of the efficiency phase and,
	// when -high-qps is the same rate, the latency rounds (cpuN in all), so
	// that one phase's noise does not rank the variants.
	cpuUS float64
	cpuN  int
}

// table is the comparison's result.
type table struct {
	cfg   *config
	sums  []*summary
	byVar map[string]*summary
}

func buildTable(cfg *config, all []*measurement) *table {
	t := &table{cfg: cfg, byVar: map[string]*summary{}}
	for _, v := range cfg.variants {
		s := &summary{v: v, reconciled: "off"}
		t.sums = append(t.sums, s)
		t.byVar[v.name] = s
	}
	for _, m := range all {
		s := t.byVar[m.Variant]
		switch {
		case !m.ok():
			if s.reconciled != "MISMATCH" {
				s.reconciled = "failed run"
			}
			continue
		case m.Phase == phaseEfficiency:
			s.eff = m
		case m.Phase == phaseLatency: // the median of the rounds counts, below
			s.lats = append(s.lats, m)
		case m.Phase == phaseStep:
			s.held(m, cfg)
		}
		switch {
		case m.Errors > 0:
			s.reconciled = fmt.Sprintf("client errors (%s %d)", m.Phase, m.Errors)
		case m.Reconc == "ok" && s.reconciled == "off":
			s.reconciled = "ok"
		case m.Reconc != "ok" && m.Reconc != "off":
			s.reconciled = "MISMATCH"
		}
	}
	for _, s := range t.sums {
		if s.lat = medianLatency(s.lats); s.lat != nil {
			s.held(s.lat, cfg)
		}
		// The efficiency phase is one measurement: at the rate of the
		// latency rounds their median decides, as for the p99 shown.
		if s.eff != nil && (s.lat == nil || s.lat.Target != s.eff.Target) {
			s.held(s.eff, cfg)
		}
		s.rounds = overRounds(s.lats)
		var us []float64
		for _, m := range append([]*measurement{s.eff}, s.lats...) {
			if m != nil && m.Target == cfg.qps && m.ServerUS > 0 {
				us = append(us, m.ServerUS)
			}
		}
		s.cpuUS, s.cpuN = runlog.MedianOf(us), len(us)
	}
	return t
}

// stallShare is the share of the rate below which a second counts as a
// stall (the targets' "no second under 90 %").
const stallShare = 0.9

// rounds is what a variant's latency rounds say together: a tail shows in
// one round of several, so the worst of them is kept beside the median.
type rounds struct {
	n              int
	p99Min, p99Max float64 // the spread of the rounds' p99s, ms
	p999Max        float64 // the highest round p99.9, ms
	worstS         float64 // the highest p99 of any second of any round, ms
	lowS           float64 // the fewest answers in any second of any round ÷ the rate
	stalled        int     // rounds with a second under 90 % of the rate answered
}

func overRounds(ms []*measurement) rounds {
	r := rounds{lowS: 1}
	for _, m := range ms {
		if r.n == 0 || m.P99 < r.p99Min {
			r.p99Min = m.P99
		}
		r.n++
		r.p99Max, r.p999Max, r.worstS = max(r.p99Max, m.P99), max(r.p999Max, m.P999), max(r.worstS, m.WorstS)
		r.lowS = min(r.lowS, m.LowS)
		if m.LowS < stallShare {
			r.stalled++
		}
	}
	return r
}

// held counts m's rate as held when its p99 is within -max-p99.
func (s *summary) held(m *measurement, cfg *config) {
	if m.P99 <= harness.Millis(cfg.maxP99) && m.Answered > s.maxQPS {
		s.maxQPS, s.maxAt = m.Answered, m.Target
	}
}

// cell formats args, or is "–" when !ok: the figure is missing.
func cell(ok bool, format string, args ...any) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf(format, args...)
}

// orNone is m, or a measurement with no figures for a missing one.
func orNone(m *measurement) *measurement {
	if m == nil {
		return &measurement{ServerWait: -1, ClientWait: -1}
	}
	return m
}

func (t *table) figures() *harness.Table {
	c := t.cfg
	g := &harness.Table{Head: []string{"variant", "idle cores", "RSS/conn B",
		fmt.Sprintf("server µs/SHAKE @%dk", c.qps/1000), "client µs/SHAKE", "allocs/SHAKE",
		fmt.Sprintf("p99 @%dk ms", c.qps/1000), fmt.Sprintf("p99 @%dk ms", c.highQPS/1000), "p99 rounds min–max ms",
		fmt.Sprintf("p99.9 @%dk ms", c.highQPS/1000), "p99.9 worst round ms", "worst second p99 ms", "lowest second answered (rounds with one under 90 %)",
		"server p99 ms (decode → write; → batch start)", "threads waiting for a CPU (server; client)",
		fmt.Sprintf("max QPS p99≤%v", c.maxP99), "other cores", "money"}}
	for _, s := range t.sums {
		e, l, r := orNone(s.eff), orNone(s.lat), s.rounds
		eff := func(format string, v float64) string { return cell(s.eff != nil, format, v) }
		cpu := cell(s.cpuN > 0, "%.1f", s.cpuUS)
		if s.cpuN > 1 {
			cpu = fmt.Sprintf("%.1f (median of %d)", s.cpuUS, s.cpuN)
		}
		g.Add(s.v.name, eff("%.3f", e.IdleCPU), eff("%.0f", e.ConnRSS), cpu, eff("%.1f", e.ClientUS), eff("%.3f", e.Allocs), eff("%.2f", e.P99),
			cell(s.lat != nil, "%.2f", l.P99), cell(r.n > 0, "%.2f–%.2f (%d)", r.p99Min, r.p99Max, r.n),
			cell(s.lat != nil, "%.2f", l.P999), cell(r.n > 0, "%.2f", r.p999Max), cell(r.n > 0, "%.2f", r.worstS),
			cell(r.n > 0, "%.0f %% (%d)", 100*r.lowS, r.stalled),
			cell(l.SrvP99 != 0, "≤ %.3f; ≤ %.3f", l.SrvP99, l.WaitP99), // none in bare mode: no stages to time
			cpuWaits(l), cell(s.maxQPS > 0, "%.0f (of %d)", s.maxQPS, s.maxAt), eff("%.2f", e.OtherCores), s.reconciled)
	}
	return g
}

// cpuWaits is how many of the server's and the load client's threads waited
// for a CPU on average in m's window, or "–" where it was not measured.
func cpuWaits(m *measurement) string {
	return cell(m.ServerWait >= 0 && m.ClientWait >= 0, "%.2f; %.2f", m.ServerWait, m.ClientWait)
}

// ratios compares every variant with the default pipeline (ring).
func (t *table) ratios() *harness.Table {
	g := &harness.Table{Head: []string{"variant ÷ ring", "server CPU/SHAKE", fmt.Sprintf("p99 @%dk", t.cfg.highQPS/1000), "max QPS", "RSS/conn", "idle CPU"}}
	base := t.byVar["ring"]
	if base == nil || base.eff == nil {
		return g
	}
	ratio := func(a, b float64) string { return cell(a > 0 && b > 0, "%.2f×", a/b) }
	for _, s := range t.sums {
		if s != base && s.eff != nil {
			g.Add(s.v.name, ratio(s.cpuUS, base.cpuUS), ratio(orNone(s.lat).P99, orNone(base.lat).P99),
				ratio(s.maxQPS, base.maxQPS), ratio(s.eff.ConnRSS, base.eff.ConnRSS), ratio(s.eff.IdleCPU, base.eff.IdleCPU))
		}
	}
	return g
}

// targets checks the pipeline's performance targets that this run
// measures, the ring server's against bare I/O's and absolute.
func (t *table) targets() *harness.Table {
	g := &harness.Table{Head: []string{"target", "measured", "verdict"}}
	ring, bare := t.byVar["ring"], t.byVar["bare"]
	check := func(name string, ok bool, measured string) {
		g.Add(name, measured, map[bool]string{true: "met", false: "MISSED"}[ok])
	}
	if ring == nil || ring.eff == nil || ring.lat == nil {
		return g
	}
	c := t.cfg
	if bare != nil && bare.eff != nil && bare.lat != nil {
		r := ring.cpuUS / bare.cpuUS
		check(fmt.Sprintf("server CPU per SHAKE @%d ≤ 1.15× bare", c.qps), r <= 1.15,
			fmt.Sprintf("%.1f µs vs %.1f µs: %.2f× (medians of %d and %d)", ring.cpuUS, bare.cpuUS, r, ring.cpuN, bare.cpuN))
		if bare.maxQPS > 0 {
			r = ring.maxQPS / bare.maxQPS
			check(fmt.Sprintf("highest rate with p99 ≤ %v ≥ 0.95× bare", c.maxP99), r >= 0.95,
				fmt.Sprintf("%.0f/s vs %.0f/s: %.2f×", ring.maxQPS, bare.maxQPS, r))
		}
		r = ring.lat.P99 / bare.lat.P99
		check(fmt.Sprintf("p99 @%d ≤ 1.5× bare", c.highQPS), r <= 1.5,
			fmt.Sprintf("%.2f ms vs %.2f ms: %.2f×", ring.lat.P99, bare.lat.P99, r))
		check(fmt.Sprintf("no second under 90 %% of %d answered where bare has none", c.highQPS),
			ring.rounds.lowS >= stallShare || bare.rounds.lowS < stallShare,
			fmt.Sprintf("lowest second %.0f %% vs %.0f %%; rounds with a second under 90 %%: %d of %d vs %d of %d",
				100*ring.rounds.lowS, 100*bare.rounds.lowS, ring.rounds.stalled, ring.rounds.n, bare.rounds.stalled, bare.rounds.n))
	}
	check(fmt.Sprintf("p99 @%d ≤ 10 ms", c.highQPS), ring.lat.P99 <= 10, fmt.Sprintf("%.2f ms", ring.lat.P99))
	check(fmt.Sprintf("p99.9 @%d ≤ 25 ms", c.highQPS), ring.lat.P999 <= 25, fmt.Sprintf("%.2f ms", ring.lat.P999))
	check(fmt.Sprintf("no second over 50 ms @%d (%d rounds × %v here)", c.highQPS, ring.rounds.n, c.highDur), ring.rounds.worstS <= 50, fmt.Sprintf("worst second p99 %.2f ms", ring.rounds.worstS))
	check("allocations ≤ 0.05 per SHAKE", ring.eff.Allocs <= 0.05, fmt.Sprintf("%.3f", ring.eff.Allocs))
	check("load client CPU per SHAKE ≤ the server's", ring.eff.ClientUS <= ring.eff.ServerUS,
		fmt.Sprintf("%.1f µs vs %.1f µs", ring.eff.ClientUS, ring.eff.ServerUS))
	check("server RSS per logged-in idle connection ≤ 512 B", ring.eff.ConnRSS <= 512, fmt.Sprintf("%.0f B", ring.eff.ConnRSS))
	check("idle server RSS with default flags ≤ 50 MB", ring.eff.IdleRSS <= 50e6, fmt.Sprintf("%.1f MB", float64(ring.eff.IdleRSS)/1e6))
	return g
}

func (t *table) text() string {
	return t.figures().Text() + "\n" + t.ratios().Text() + "\n" + t.targets().Text()
}

// doc is report.md: how the run measured, the variants and the tables.
func (t *table) doc(dir string) harness.Doc {
	cfg := t.cfg
	d := harness.Doc{harness.H1("perf-compare " + dir), harness.Para(fmt.Sprintf("%d users on loopback; every measurement a fresh server and load client: a %v ramp at QPS 0, "+
		"then the rate; CPU, allocations and answers over the rate's phase less its first and last second. "+
		"Every user sends (the load client's schedule spreads the rate over all of them). "+
		"Efficiency %d QPS × %v, latency %d QPS × %v in %d round(s), the variants interleaved in each (p99 and p99.9: the round with the median p99; "+
		"the spread: the lowest and highest round p99; worst second and lowest second: over every round; server CPU per SHAKE: the median of the measurements at %d QPS), throughput steps %v × %v (until p99 > %v; the highest rate held is the best of the steps, the median latency round and, at a rate with no rounds, the efficiency phase). Shake campaign %d/s except in bare mode. "+
		"*other cores* is the machine's busy CPU that was neither the server nor the load client (noise); "+
		"*threads waiting for a CPU* is how many of the server's and the load client's threads were runnable and not running, on average over the median round's window (run_delay in /proc/PID/task/*/schedstat): "+
		"above zero the machine was short of CPU, and a tail there is a queue for the CPU as much as anything the server does. Raw figures: results.json; each run's logs and commands: its directory.",
		cfg.users, cfg.ramp, cfg.qps, cfg.qpsDur, cfg.highQPS, cfg.highDur, cfg.repeat, cfg.qps, cfg.steps, cfg.stepDur, cfg.maxP99, cfg.shakeRate))}
	if cfg.noise > 0 {
		d = append(d, harness.Para(fmt.Sprintf("Noise: %d goroutines of compare itself each busy %v of every %v for the whole run (counted in *other cores*).", cfg.noise, cfg.noiseBusy, noisePeriod)))
	}
	vs := &harness.Table{Head: []string{"variant", "server flags", "what"}}
	for _, v := range cfg.variants {
		vs.Add("**"+v.name+"**", cell(v.flags != nil, "`%s`", strings.Join(v.flags, " ")), v.what)
	}
	return append(d, harness.H2("Variants"), vs, harness.H2("Figures"), t.figures(),
		harness.H2("Ratios to the default pipeline"), t.ratios(), harness.H2("Targets"), t.targets())
}
