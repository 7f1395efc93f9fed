package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// result is one line of go test -bench output: a benchmark's name (without
// the -GOMAXPROCS suffix), its iteration count and its metrics by unit
// (ns/op, B/op, allocs/op and the custom ones).
type result struct {
	name    string
	procs   int // the -N suffix; 0 when absent (GOMAXPROCS=1)
	iters   int64
	metrics map[string]float64
}

// parse reads go test -bench output and returns its result lines in order.
// Other lines (goos:, PASS, --- BENCH logs, build errors) are skipped.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if res, ok := parseLine(sc.Text()); ok {
			out = append(out, res)
		}
	}
	return out, sc.Err()
}

// parseLine parses "BenchmarkName-N  iters  v1 unit1  v2 unit2 …".
func parseLine(line string) (result, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return result{}, false
	}
	iters, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return result{}, false
	}
	res := result{name: f[0], iters: iters, metrics: make(map[string]float64, len(f)/2-1)}
	if i := strings.LastIndexByte(f[0], '-'); i > 0 {
		if p, err := strconv.Atoi(f[0][i+1:]); err == nil {
			res.name, res.procs = f[0][:i], p
		}
	}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return result{}, false
		}
		res.metrics[f[i+1]] = v
	}
	return res, true
}

// stat is the median of one metric over the -count runs of one benchmark,
// and its spread: the largest distance of a run from the median, relative to
// the median.
type stat struct {
	median, spread float64
	n              int
}

// summary maps benchmark name → unit → stat.
type summary struct {
	stats map[string]map[string]stat
	procs int
}

func (s summary) get(name, unit string) (stat, bool) {
	st, ok := s.stats[name][unit]
	return st, ok
}

func summarize(rs []result) summary {
	samples := map[string]map[string][]float64{}
	s := summary{stats: map[string]map[string]stat{}}
	for _, r := range rs {
		if samples[r.name] == nil {
			samples[r.name] = map[string][]float64{}
		}
		for unit, v := range r.metrics {
			samples[r.name][unit] = append(samples[r.name][unit], v)
		}
		s.procs = r.procs
	}
	for name, units := range samples {
		s.stats[name] = map[string]stat{}
		for unit, xs := range units {
			m := median(xs)
			spread := 0.0
			for _, x := range xs {
				if m != 0 {
					spread = max(spread, math.Abs(x-m)/m)
				}
			}
			s.stats[name][unit] = stat{median: m, spread: spread, n: len(xs)}
		}
	}
	return s
}

// median of xs (the mean of the middle two for an even count); xs is not
// modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// The ring's targets on a 2-core machine, as ratios within one run: its
// events/s at least minVsChan times a buffered channel's, and its ns/event
// at most maxVsDisruptor times go-disruptor's.
type shapeTarget struct {
	shape, about string
	minVsChan    float64 // ring events/s ÷ chan events/s must be ≥ this; 0: no target
}

var shapeTargets = []shapeTarget{
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

type meta struct {
	machine, load, command string
}

// writeReport writes the Markdown tables: throughput per shape, wake-up
// latency, idle cost, then the machine and the command.
func writeReport(w io.Writer, s summary, m meta) {
	fmt.Fprintf(w, "### Throughput: ns/event, median of %s (±: largest deviation of a run)\n\n", runs(s))
	fmt.Fprintln(w, "| shape | ring | go-disruptor | chan | ring-spin | ring vs chan (events/s) | ring vs go-disruptor (time) | ring allocs/event | ring events/batch | verdict |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|---|---|--:|--:|---|")
	for _, t := range shapeTargets {
		name := func(impl string) string { return "BenchmarkRing/shape=" + t.shape + "/impl=" + impl }
		ring, okRing := s.get(name("ring"), "ns/op")
		dis, okDis := s.get(name("disruptor"), "ns/op")
		ch, okChan := s.get(name("chan"), "ns/op")
		spin, okSpin := s.get(name("ring-spin"), "ns/op")
		allocs, okAllocs := s.get(name("ring"), "allocs/op")
		batch, okBatch := s.get(name("ring"), "events/batch")

		var misses []string
		vsChan := "—"
		if okRing && okChan {
			r := ch.median / ring.median
			vsChan = fmt.Sprintf("%.2f×", r)
			if t.minVsChan > 0 {
				vsChan += fmt.Sprintf(" (≥ %g×) %s", t.minVsChan, passMiss(r >= t.minVsChan))
				if r < t.minVsChan {
					misses = append(misses, "vs chan")
				}
			}
		} else if t.minVsChan > 0 {
			misses = append(misses, "no chan/ring data")
		}
		vsDis := "—"
		if okRing && okDis {
			r := ring.median / dis.median
			vsDis = fmt.Sprintf("%.2f× (≤ %g×) %s", r, maxVsDisruptor, passMiss(r <= maxVsDisruptor))
			if r > maxVsDisruptor {
				misses = append(misses, "vs go-disruptor")
			}
		} else {
			misses = append(misses, "no go-disruptor/ring data")
		}
		allocCell := "—"
		if okAllocs {
			allocCell = fmt.Sprintf("%g %s", allocs.median, passMiss(allocs.median == 0))
			if allocs.median != 0 {
				misses = append(misses, "allocs")
			}
		} else {
			misses = append(misses, "no allocs data")
		}
		verdict := "PASS"
		if len(misses) > 0 {
			verdict = "MISS: " + strings.Join(misses, ", ")
		}
		fmt.Fprintf(w, "| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t.shape, t.about,
			nsCell(ring, okRing), nsCell(dis, okDis), nsCell(ch, okChan), nsCell(spin, okSpin),
			vsChan, vsDis, allocCell, numCell(batch, okBatch, "%.1f"), verdict)
	}

	fmt.Fprintf(w, "\n### Wake-up latency of an idle consumer (publish → handler start), µs, median of %s\n\n", runs(s))
	fmt.Fprintln(w, "| producer after publishing | impl | p50 | p99 | max | target | verdict |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|---|---|")
	for _, prod := range []string{"sleeps", "spins"} {
		for _, impl := range []string{"ring", "ring-spin", "disruptor", "chan"} {
			name := "BenchmarkWakeLatency/producer=" + prod + "/impl=" + impl
			p50, ok50 := s.get(name, "p50-us")
			p99, ok99 := s.get(name, "p99-us")
			mx, okMax := s.get(name, "max-us")
			target, verdict := "—", "—"
			if impl == "ring" {
				target = fmt.Sprintf("p99 < %g µs", maxWakeP99)
				verdict = "no data"
				if ok99 {
					verdict = passMiss(p99.median < maxWakeP99)
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", prod, implName(impl),
				numCell(p50, ok50, "%.1f"), numCell(p99, ok99, "%.1f"), numCell(mx, okMax, "%.0f"), target, verdict)
		}
	}

	fmt.Fprintf(w, "\n### Idle cost: 256 rings × 4 chained stages (1,024 stage goroutines) with no traffic, median of %s\n\n", runs(s))
	fmt.Fprintln(w, "| impl | CPU, % of one core | target | verdict |")
	fmt.Fprintln(w, "|---|--:|---|---|")
	for _, impl := range []string{"ring", "disruptor", "chan", "none"} {
		st, ok := s.get("BenchmarkIdleCost/impl="+impl, "%cpu")
		target, verdict := "—", "—"
		if impl == "ring" {
			target = fmt.Sprintf("< %g %%", maxIdlePct)
			verdict = "no data"
			if ok {
				verdict = passMiss(st.median < maxIdlePct)
			}
		}
		label := implName(impl)
		switch impl {
		case "ring":
			label += " (WaitPark)"
		case "disruptor":
			label += " (default wait: sleep-polls)"
		case "chan":
			label += " (blocked receives)"
		case "none":
			label = "none (the harness alone)"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", label, numCell(st, ok, "%.2f"), target, verdict)
	}

	procs := "unknown"
	if s.procs > 0 {
		procs = strconv.Itoa(s.procs)
	}
	fmt.Fprintf(w, "\nMachine: %s, GOMAXPROCS %s.  \n", m.machine, procs)
	if m.load != "" {
		fmt.Fprintf(w, "Load: %s.  \n", m.load)
	}
	fmt.Fprintf(w, "Command: %s.\n", m.command)
}

func runs(s summary) string {
	n := 0
	for _, units := range s.stats {
		for _, st := range units {
			n = max(n, st.n)
		}
	}
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

func implName(impl string) string {
	if impl == "disruptor" {
		return "go-disruptor"
	}
	return impl
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// nsCell formats ns/event with enough digits for small values and the spread.
func nsCell(st stat, ok bool) string {
	if !ok {
		return "—"
	}
	f := "%.0f"
	switch {
	case st.median < 10:
		f = "%.2f"
	case st.median < 100:
		f = "%.1f"
	}
	c := fmt.Sprintf(f, st.median)
	if st.n > 1 {
		c += fmt.Sprintf(" ±%.0f%%", 100*st.spread)
	}
	return c
}

func numCell(st stat, ok bool, f string) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf(f, st.median)
}
