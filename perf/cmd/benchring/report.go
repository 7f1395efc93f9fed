package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// parseLine parses a result line of go test -bench output,
// "BenchmarkName-N  iters  v1 unit1  v2 unit2 …": the name without the
// -GOMAXPROCS suffix, N (0 without one: GOMAXPROCS=1), the metrics by unit.
func parseLine(line string) (name string, procs int, metrics map[string]float64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", 0, nil, false
	}
	if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
		return "", 0, nil, false
	}
	name, metrics = f[0], map[string]float64{}
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if p, err := strconv.Atoi(name[i+1:]); err == nil {
			name, procs = name[:i], p
		}
	}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", 0, nil, false
		}
		metrics[f[i+1]] = v
	}
	return name, procs, metrics, true
}

// stat is the median of one metric over the runs of one benchmark, and its
// spread: the largest distance of a run from the median, relative to it.
type stat struct {
	median, spread float64
	n              int
}

// summary is every benchmark's stats by "name unit", the most runs of any,
// and what go test says of the machine: its CPU and GOMAXPROCS.
type summary struct {
	stats      map[string]stat
	runs       int
	cpu, procs string
}

// median is the median of name's unit, NaN when it was not measured.
func (s summary) median(name, unit string) float64 {
	if st, ok := s.stats[name+" "+unit]; ok {
		return st.median
	}
	return math.NaN()
}

// cell formats the median of name's unit, "—" when it was not measured.
func (s summary) cell(name, unit, format string) string {
	if v := s.median(name, unit); !math.IsNaN(v) {
		return fmt.Sprintf(format, v)
	}
	return "—"
}

// summarize reads go test -bench output, skipping the lines that are not
// results (goos:, PASS, --- BENCH logs, build errors).
func summarize(r io.Reader) (summary, error) {
	samples := map[string][]float64{}
	s := summary{stats: map[string]stat{}, cpu: "unknown CPU", procs: "unknown"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, procs, metrics, _ := parseLine(sc.Text())
		for unit, v := range metrics {
			samples[name+" "+unit] = append(samples[name+" "+unit], v)
		}
		if procs > 0 {
			s.procs = strconv.Itoa(procs)
		} else if cpu, ok := strings.CutPrefix(sc.Text(), "cpu: "); ok {
			s.cpu = strings.TrimSpace(cpu)
		}
	}
	for key, xs := range samples {
		m := runlog.MedianOf(xs)
		spread := 0.0
		for _, x := range xs {
			if m != 0 {
				spread = max(spread, math.Abs(x-m)/m)
			}
		}
		s.stats[key] = stat{median: m, spread: spread, n: len(xs)}
		s.runs = max(s.runs, len(xs))
	}
	return s, sc.Err()
}

// The ring's targets on a 2-core machine, as ratios within one run: its
// events/s at least minVsChan times a buffered channel's (0: no target), and
// its ns/event at most maxVsDisruptor times go-disruptor's.
var shapeTargets = []struct {
	shape, about string
	minVsChan    float64
}{
	{"1to1-claim1", "1 producer → 1 consumer, claim 1", 2},
	{"1to1-claim16", "1 producer → 1 consumer, claim 16", 5},
	{"4to1-claim1", "4 producers → 1 consumer, claim 1", 2},
	{"4to1-claim16", "4 producers → 1 consumer, claim 16", 2},
	{"pipeline3", "1 producer → 3 stages in sequence, claim 1", 0},
}

const (
	maxVsDisruptor = 1.5  // ring ns/event ÷ go-disruptor ns/event, every row
	maxWakeP99     = 50.0 // µs, ring
	maxIdlePct     = 1.0  // % of one core for 256 rings × 4 parked stages
)

// report is the tables: throughput per shape, wake-up latency, idle cost,
// then about, which says where they were measured.
func report(s summary, about ...harness.Block) harness.Doc {
	runs := fmt.Sprintf("%d runs", s.runs)
	if s.runs == 1 {
		runs = "1 run"
	}
	thr := &harness.Table{Right: true, Head: []string{"shape", "ring", "go-disruptor", "chan", "ring-spin",
		"ring vs chan (events/s)", "ring vs go-disruptor (time)", "ring allocs/event", "ring events/batch", "verdict"}}
	for _, t := range shapeTargets {
		name := func(impl string) string { return "BenchmarkRing/shape=" + t.shape + "/impl=" + impl }
		ring := s.median(name("ring"), "ns/op")
		var misses []string
		// check is a figure's cell against its target; unmeasured, "—"
		// and a miss.
		check := func(v float64, cell string, ok bool, miss, none string) string {
			if math.IsNaN(v) {
				misses = append(misses, none)
				return "—"
			} else if !ok {
				misses = append(misses, miss)
			}
			return cell + " " + passMiss(ok)
		}
		vsChan := s.median(name("chan"), "ns/op") / ring
		chanCell := "—"
		if t.minVsChan > 0 {
			chanCell = check(vsChan, fmt.Sprintf("%.2f× (≥ %g×)", vsChan, t.minVsChan), vsChan >= t.minVsChan, "vs chan", "no chan/ring data")
		} else if !math.IsNaN(vsChan) {
			chanCell = fmt.Sprintf("%.2f×", vsChan)
		}
		vsDis := ring / s.median(name("disruptor"), "ns/op")
		allocs := s.median(name("ring"), "allocs/op")
		cells := []string{chanCell,
			check(vsDis, fmt.Sprintf("%.2f× (≤ %g×)", vsDis, maxVsDisruptor), vsDis <= maxVsDisruptor, "vs go-disruptor", "no go-disruptor/ring data"),
			check(allocs, fmt.Sprintf("%g", allocs), allocs == 0, "allocs", "no allocs data"),
			s.cell(name("ring"), "events/batch", "%.1f"), "PASS"}
		if len(misses) > 0 {
			cells[4] = "MISS: " + strings.Join(misses, ", ")
		}
		thr.Add(append([]string{t.shape + " (" + t.about + ")", s.nsCell(name("ring")), s.nsCell(name("disruptor")),
			s.nsCell(name("chan")), s.nsCell(name("ring-spin"))}, cells...)...)
	}
	wake := &harness.Table{Right: true, Head: []string{"producer after publishing", "impl", "p50", "p99", "max", "target", "verdict"}}
	for _, prod := range []string{"sleeps", "spins"} {
		for _, impl := range []string{"ring", "ring-spin", "disruptor", "chan"} {
			name := "BenchmarkWakeLatency/producer=" + prod + "/impl=" + impl
			wake.Add(append([]string{prod, strings.Replace(impl, "disruptor", "go-disruptor", 1), s.cell(name, "p50-us", "%.1f"),
				s.cell(name, "p99-us", "%.1f"), s.cell(name, "max-us", "%.0f")}, s.target(impl, name, "p99-us", maxWakeP99, "p99 < %g µs")...)...)
		}
	}
	idle := &harness.Table{Right: true, Head: []string{"impl", "CPU, % of one core", "target", "verdict"}}
	for _, impl := range [][2]string{{"ring", "ring (WaitPark)"}, {"disruptor", "go-disruptor (default wait: sleep-polls)"},
		{"chan", "chan (blocked receives)"}, {"none", "none (the harness alone)"}} {
		name := "BenchmarkIdleCost/impl=" + impl[0]
		idle.Add(append([]string{impl[1], s.cell(name, "%cpu", "%.2f")}, s.target(impl[0], name, "%cpu", maxIdlePct, "< %g %%")...)...)
	}
	return append(harness.Doc{
		harness.H3("Throughput: ns/event, median of " + runs + " (±: largest deviation of a run)"), thr,
		harness.H3("Wake-up latency of an idle consumer (publish → handler start), µs, median of " + runs), wake,
		harness.H3("Idle cost: 256 rings × 4 chained stages (1,024 stage goroutines) with no traffic, median of " + runs), idle,
	}, about...)
}

// target is the target and verdict cells of impl's row: the ring's median of
// unit below bound, none for the others.
func (s summary) target(impl, name, unit string, bound float64, target string) []string {
	if impl != "ring" {
		return []string{"—", "—"}
	} else if v := s.median(name, unit); !math.IsNaN(v) {
		return []string{fmt.Sprintf(target, bound), passMiss(v < bound)}
	}
	return []string{fmt.Sprintf(target, bound), "no data"}
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// nsCell formats ns/event with enough digits for small values, and the
// spread.
func (s summary) nsCell(name string) string {
	st, ok := s.stats[name+" ns/op"]
	if !ok {
		return "—"
	}
	f := "%.0f"
	if st.median < 10 {
		f = "%.2f"
	} else if st.median < 100 {
		f = "%.1f"
	}
	if st.n > 1 {
		return fmt.Sprintf(f+" ±%.0f%%", st.median, 100*st.spread)
	}
	return fmt.Sprintf(f, st.median)
}
