package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// ms is d in milliseconds: three decimals, as loopback latencies are well
// under one (harness.Ms has two), "–" for none.
func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f ms", float64(d)/1e6)
}

// bound formats a histogram bucket's upper bound in seconds.
func bound(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case math.IsInf(s, 1):
		return "> last bucket"
	case s < 1e-3:
		return fmt.Sprintf("≤ %.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("≤ %.3g ms", s*1e3)
	}
	return fmt.Sprintf("≤ %.3g s", s)
}

func cores(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f cores", v)
}

func num(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

func pct(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v):
		return "–"
	case v < 0.001:
		return "< 0.1 %"
	}
	return fmt.Sprintf("%.1f %%", v*100)
}

// summaryTable is the report's figures, one row a phase: what make perf
// prints at the end.
func summaryTable(a *analysis) harness.Doc {
	load := &harness.Table{Right: true, Head: []string{"phase", "seconds", "target QPS", "achieved QPS", "envelopes got/s", "opened/s",
		"p50 (median s)", "p99 (median s)", "p99 (worst s)", "server p50 / p99 / p99.9", "server SHAKE p99", "sched latency p99 / p99.9", "errors"}}
	cost := &harness.Table{Right: true, Head: []string{"phase", "server CPU", "client CPU", "machine busy", "CPU per SHAKE", "allocs per SHAKE", "bytes per SHAKE",
		"GCs", "max GC pause", "GC CPU (of GOMAXPROCS)", "GC share of server CPU", "STW pauses (runtime/metrics)", "max RSS", "goroutines"}}
	for _, f := range a.figs {
		perShake := func(v float64, format string) string {
			if f.Shakes == 0 {
				return "–"
			}
			return fmt.Sprintf(format, v)
		}
		load.Add(f.Name, fmt.Sprintf("%.0f–%.0f", f.From, f.To), fmt.Sprint(f.QPS), num(f.Achieved),
			num(f.Got), num(f.Opened), ms(f.P50), ms(f.P99), ms(f.P99Worst),
			bound(f.SrvP50)+" / "+bound(f.SrvP99)+" / "+bound(f.SrvP999), bound(f.SrvShakeP99), bound(f.SchedP99)+" / "+bound(f.SchedP999), fmt.Sprint(f.Errors))
		cpuPer := "–"
		if f.CPUPerShake > 0 {
			cpuPer = fmt.Sprintf("%.1f µs", float64(f.CPUPerShake)/1e3)
		}
		pauses := "–"
		if f.Pauses > 0 {
			pauses = fmt.Sprintf("%.0f, max %s", f.Pauses, bound(f.PauseMax))
		}
		cost.Add(f.Name, cores(f.CPUCores), cores(f.ClientCores), cores(f.MachineCores), cpuPer,
			perShake(f.AllocsPerReq, "%.2f"), perShake(f.BytesPerReq, "%.0f B"),
			fmt.Sprint(f.GCs), ms(f.MaxPause), pct(f.GCCPU), pct(f.GCShare), pauses, harness.MiB(f.RSSMax), num(f.Goroutine))
	}
	return harness.Doc{harness.H3("Load and latency (load client)"), load, harness.H3("Server cost"), cost}
}

// buildReport writes the run up: figures, charts, flame graphs, profiles
// and the commands.
func buildReport(a *analysis, out *outcome, dir string, flames []flameOut, charts []chart, log *harness.Steps) harness.Doc {
	cfg := a.cfg
	d := harness.Doc{harness.H1("hongbao perf run " + filepath.Base(dir))}
	osrel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	d = append(d, harness.Para(fmt.Sprintf("%d users on loopback (`-source %s`), phases `%s` (QPS@duration from the load client's start at %s), "+
		"shake campaign %d/s from the steady phase to the end, send campaign %d/s × %d recipients in the send phase. "+
		"Server flags: `%s`. Machine: %d CPUs (server and load client share them), Linux %s, %s.",
		cfg.users, cfg.Source, cfg.plan(), a.start.Format("15:04:05"), cfg.camps.Shake, cfg.camps.Send, cfg.camps.Recipients,
		cmp.Or(cfg.ServerFlags, "defaults"), runtime.NumCPU(), strings.TrimSpace(string(osrel)), runtime.Version())))
	d = append(d, harness.Para(verdict(a, out)))

	d = append(d, harness.H2("Figures per phase"))
	d = append(d, summaryTable(a)...)
	d = append(d, harness.Para("How they are computed. *Achieved QPS*, *envelopes got/s* and *opened/s* are means over the phase's seconds of the load client's timeline; "+
		"*p50*/*p99* are the median over those seconds of each second's percentile (SHAKE latency from the scheduled send, coordinated omission corrected), *worst s* the highest second. "+
		"*Server p50 / p99 / p99.9* is the latency inside the server (every answer, not only SHAKEs), from the difference of `hongbao_latency_seconds` between the phase's first and last scrape (upper bounds of buckets at most 25 % wide); the server starts that clock at the start of the epoll loop's chunk of up to 64 reads that read the request (its SET runs after them) and stops it at the end of the egress write of the answer (the wait up to the start of the egress batch alone is `hongbao_batch_wait_seconds`). "+
		"*Server SHAKE p99* is the same for the SHAKEs alone, from the histogram's `type=\"shake\"` series (– when the server does not label it by request type). "+
		"*Sched latency* is how long the server's runnable goroutines waited for a P, runtime/metrics `/sched/latencies:seconds` (`go_sched_latencies_seconds`) over the same scrapes (upper bounds). "+
		"*Server CPU* and *client CPU* are utime+stime of /proc/PID/stat over the same scrapes, *machine busy* every CPU's busy time in /proc/stat (user+nice+system+irq+softirq of all processes: what it has beyond the two is someone else's; all three are tick-sampled, so they add up only roughly); *CPU per SHAKE* divides it by the SHAKEs the server answered (`hongbao_shake_total`), so it carries every other cost of the phase too (pushes, OPENs, campaigns, the scrapes, and in the steady phase the profilers). "+
		"*Allocs*/*bytes per SHAKE* are the deltas of `go_memstats_mallocs_total`/`go_memstats_alloc_bytes_total` over the SHAKEs, likewise all-inclusive. "+
		"*GCs*, *max GC pause* (both stop-the-world phases) and *GC CPU* (sweep termination + assists + background marking + mark termination, idle-time marking excluded, over GOMAXPROCS × the phase) come from the GODEBUG=gctrace=1 lines; "+
		"*GC share* is `go_gc_cpu_seconds_total` (runtime/metrics /cpu/classes/gc/total, idle marking included) over the server's CPU; "+
		"*STW pauses* counts `go_gc_pauses_seconds`, runtime/metrics `/gc/pauses:seconds`, which the Go runtime documents as the same histogram as `/sched/pauses/total/gc:seconds` (one entry per stop-the-world phase: two a GC)."))
	if a.idle.Seconds > 0 {
		d = append(d, harness.Para(fmt.Sprintf("Idle baseline (the ramp's last %.0f s, all %d users connected, no SHAKE): %.2f cores, %.0f allocations a second, about %.0f per `/metrics` scrape — "+
			"the scrape runs once a second throughout, so at -qps %d it adds about %.2f allocations per SHAKE to the figures above.",
			a.idle.Seconds, cfg.users, a.idle.CPUCores, a.idle.AllocsPerSec, a.idle.ScrapeMallocs, cfg.qps, a.idle.AllocsPerSec/float64(cfg.qps))))
	}

	if r := a.report; r != nil {
		d = append(d, harness.H2("Whole run (report.json)"))
		d = append(d, requestTable(r))
		d = append(d, harness.Para(fmt.Sprintf("Errors: %s. Skipped (not connected) %d, dropped (backlog) %d. At most %d connections up; %d connects.",
			errorList(r.Errors), r.Skipped, r.Backlog, r.ConnectionsMax, r.Connects)))
		if r.Reconcile != nil {
			d = append(d, harness.Para("Reconciliation with the server's `/stats` — "+r.Reconcile.Summary()))
		}
	}

	n, maxPause, forced := a.gcTotals()
	d = append(d, harness.H2("Garbage collector (gctrace)"))
	d = append(d, harness.Para(fmt.Sprintf("%d collections over the whole server run, %d of them forced (the two `heap?gc=1` snapshots around the CPU profile), longest stop-the-world %s; %d gctrace lines did not parse (another write landing in one). The lines are in `gctrace.txt`.",
		n, forced, ms(maxPause), a.gcBad)))

	d = append(d, harness.H2("Steady-phase captures"))
	c := a.caps
	if !c.CPUFrom.IsZero() {
		d = append(d, harness.Para(fmt.Sprintf("CPU profile t=%.1f–%.1f s; allocations between t=%.1f and %.1f s; runtime trace t=%.1f–%.1f s; %d goroutines (`goroutine.txt`).",
			a.t(c.CPUFrom), a.t(c.CPUTo), a.t(c.AllocsFrom), a.t(c.AllocsTo), a.t(c.TraceFrom), a.t(c.TraceTo), c.Goroutines)))
	}
	var fl harness.Links
	for _, f := range flames {
		fl = append(fl, harness.Link{Href: f.File, Text: "Flame graph: " + f.Title, Note: "`" + f.Cmd + "`"})
	}
	for _, f := range []struct{ file, note string }{
		{"cpu.pprof", "`go tool pprof -top cpu.pprof`, or `make perf-open` for the web UI"},
		{"heap.pprof", "`go tool pprof -sample_index=inuse_space -top heap.pprof`"},
		{"allocs.pprof", "`go tool pprof -sample_index=alloc_space -base=allocs-start.pprof -top allocs.pprof`"},
		{"trace.out", "`go tool trace trace.out`"},
		{"goroutine.txt", "goroutines grouped by stack"},
	} {
		if _, err := os.Stat(filepath.Join(dir, f.file)); err == nil {
			fl = append(fl, harness.Link{Href: f.file, Text: f.file, Note: f.note})
		}
	}
	if len(fl) > 0 {
		d = append(d, fl)
	}
	if p, err := readProfile(filepath.Join(dir, "cpu.pprof"), ""); err == nil {
		if t, err := top(p, "cpu", 15); err == nil {
			d = append(d, harness.H3("Top CPU (flat)"), topTable(&t))
		}
	}
	if p, err := readProfile(filepath.Join(dir, "allocs.pprof"), filepath.Join(dir, "allocs-start.pprof")); err == nil {
		if t, err := top(p, "alloc_space", 10); err == nil {
			d = append(d, harness.H3("Top allocation sites during the CPU profile (alloc_space, flat)"), topTable(&t))
		}
		if t, err := top(p, "alloc_objects", 10); err == nil {
			d = append(d, harness.H3("Top allocation sites during the CPU profile (alloc_objects, flat)"), topTable(&t))
		}
	}

	d = append(d, harness.H2("Charts"))
	for _, ch := range charts {
		d = append(d, harness.Image{Src: ch.File, Alt: ch.Title, Caption: ch.Caption})
	}

	d = append(d, harness.H2("Commands"))
	d = append(d, harness.Para("Every step of this run as a command to run by hand, in order (also in `commands.txt`); the rendering steps after them."))
	list, start := log.All()
	var b strings.Builder
	for _, st := range list {
		fmt.Fprintf(&b, "# %s: %s\n%s\n", harness.When(st.At, start), st.What, st.Cmd)
	}
	b.WriteString("# after the run: the GC trace, the flame graphs, the profiles\ngrep '^gc ' server.log >gctrace.txt\n")
	for _, f := range flames {
		b.WriteString(f.Cmd + "\n")
	}
	b.WriteString("go tool trace trace.out\nmake perf-open   # = go tool pprof -http=127.0.0.1:8081 <the latest perf/out/*/cpu.pprof>, serves until Ctrl-C\n")
	d = append(d, harness.Code(b.String()))
	d = append(d, harness.Para(thisRun(cfg)))
	return d
}

// thisRun says how to run cfg again: every flag its command line set
// (-server-flags and -client-flags carry what went on to the server and the
// load client beyond perf's own), with make and with go run.
func thisRun(cfg *config) string {
	if cfg.given == "" {
		return "This run: `make perf` (or `go run ./perf/cmd/perf` after `make build`), every flag at its default."
	}
	// PERFFLAGS goes in single quotes: a single quote within ends them.
	inMake := strings.ReplaceAll(cfg.given, "'", `'\''`)
	return fmt.Sprintf("This run: `make perf PERFFLAGS='%s'` (or `go run ./perf/cmd/perf %s` after `make build`); the flags not named were at their defaults.", inMake, cfg.given)
}

func verdict(a *analysis, out *outcome) string {
	var parts []string
	if out.clientErr != nil {
		parts = append(parts, fmt.Sprintf("**The load client failed** (%v): it exits non-zero on any connect, reset, timeout, protocol or overload error and on a reconciliation mismatch; see below and `loadclient.log`.", out.clientErr))
	} else {
		parts = append(parts, "The load client passed: no errors, reconciliation exact.")
	}
	if out.serverErr != nil {
		parts = append(parts, fmt.Sprintf("**The server did not exit 0 after SIGTERM** (%v).", out.serverErr))
	} else {
		parts = append(parts, fmt.Sprintf("The server exited 0 %v after SIGTERM.", out.stopped.Round(time.Millisecond)))
	}
	if out.captureErr != nil {
		parts = append(parts, fmt.Sprintf("**captures failed**: %v.", out.captureErr))
	}
	if out.campErr != nil {
		parts = append(parts, fmt.Sprintf("**campaigns failed**: %v.", out.campErr))
	}
	if out.startSkew != 0 {
		parts = append(parts, fmt.Sprintf("The client started %+.3f s from the second perf expected, so the campaigns and captures are off by that much.", out.startSkew))
	}
	if bad := len(a.samples) - len(slices.DeleteFunc(slices.Clone(a.samples), func(s harness.Sample) bool { return s.Err != nil })); bad > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d server samples failed (see `samples.csv`).", bad, len(a.samples)))
	}
	return strings.Join(parts, " ")
}

func requestTable(r *loadclient.Report) *harness.Table {
	t := &harness.Table{Right: true, Head: []string{"request", "sent", "answered", "lost", "unanswered", "status", "p50", "p90", "p99", "p99.9", "max"}}
	for _, k := range slices.Sorted(maps.Keys(r.Requests)) {
		q := r.Requests[k]
		if q.Sent == 0 && q.Answered == 0 {
			continue
		}
		var st []string
		for _, s := range slices.Sorted(maps.Keys(q.Status)) {
			st = append(st, fmt.Sprintf("%s:%d", s, q.Status[s]))
		}
		l := q.Latency
		t.Add(k, fmt.Sprint(q.Sent), fmt.Sprint(q.Answered), fmt.Sprint(q.Lost), fmt.Sprint(q.Unanswered),
			strings.Join(st, " "), ms(time.Duration(l.P50)), ms(time.Duration(l.P90)), ms(time.Duration(l.P99)), ms(time.Duration(l.P999)), ms(time.Duration(l.Max)))
	}
	return t
}

func errorList(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func topTable(t *topList) *harness.Table {
	tb := &harness.Table{Right: true, Head: []string{"function", "flat", "flat %", "cum", "cum %"}}
	for _, e := range t.Entries {
		p := func(v int64) string {
			if t.Total == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f %%", 100*float64(v)/float64(t.Total))
		}
		tb.Add("`"+shortFunc(e.Func)+"`", t.format(e.Flat), p(e.Flat), t.format(e.Cum), p(e.Cum))
	}
	return tb
}

// shortFunc elides the type arguments of a generic function's name,
// "ring.(*Stage[go.shape.struct { … }]).run" → "ring.(*Stage[…]).run", as
// pprof's own views do.
func shortFunc(name string) string {
	var b strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '[':
			if depth == 0 {
				b.WriteString("[…")
			}
			depth++
		case r == ']' && depth > 0:
			depth--
			if depth == 0 {
				b.WriteByte(']')
			}
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
