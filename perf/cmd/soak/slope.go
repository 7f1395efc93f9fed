package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// leastSquares returns the slope of the least-squares line through the
// points (xs[i], ys[i]) and its standard error (0 with two points or a
// perfect fit); ok is false with fewer than two distinct xs.
func leastSquares(xs, ys []float64) (slope, stderr float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	slope = sxy / sxx
	if len(xs) > 2 {
		var rss float64 // residual sum of squares
		for i := range xs {
			r := ys[i] - my - slope*(xs[i]-mx)
			rss += r * r
		}
		stderr = math.Sqrt(rss / (n - 2) / sxx)
	}
	return slope, stderr, true
}

// The verdict's rule: a figure is flat when its second-half slope, kept up
// for an hour, moves it by less than flatWithin of its mean there, or when
// that slope is within significant standard errors of 0: noise, like a
// goroutine count that steps between 170 and 172 with the admin requests.
const (
	flatWithin  = 0.05
	significant = 3.0
)

// trend is one followed figure over the load.
type trend struct {
	m                 metric
	first, last       float64 // in the report's unit
	min, max, mean2   float64 // mean2: over the second half
	slope, slope2     float64 // per minute: whole load, second half
	ok, ok2           bool
	samples, samples2 int
	stderr2           float64 // slope2's standard error
	perHourPct        float64 // slope2 × 60 / mean2, in %
	verdict           string  // flat, GROWS, falls, or ? without enough samples
}

// trends computes each followed figure's slopes over the samples taken
// during the load (from loadStart for dur) and over its second half.
// Samples that failed are left out.
func trends(samples []harness.Sample, loadStart time.Time, dur time.Duration) []trend {
	half := dur.Minutes() / 2
	var out []trend
	for _, m := range followed {
		tr := trend{m: m, min: math.Inf(1), max: math.Inf(-1)}
		var xs, ys, xs2, ys2 []float64
		for i := range samples {
			s := &samples[i]
			x := s.At.Sub(loadStart).Minutes()
			if s.Err != nil || x < 0 || x > dur.Minutes() {
				continue
			}
			y := m.value(s) / m.scale
			xs, ys = append(xs, x), append(ys, y)
			if x >= half {
				xs2, ys2 = append(xs2, x), append(ys2, y)
			}
			tr.min, tr.max = math.Min(tr.min, y), math.Max(tr.max, y)
		}
		tr.samples, tr.samples2 = len(xs), len(xs2)
		if len(ys) > 0 {
			tr.first, tr.last = ys[0], ys[len(ys)-1]
		}
		for _, y := range ys2 {
			tr.mean2 += y / float64(len(ys2))
		}
		tr.slope, _, tr.ok = leastSquares(xs, ys)
		tr.slope2, tr.stderr2, tr.ok2 = leastSquares(xs2, ys2)
		tr.verdict = "?"
		if tr.ok2 && tr.mean2 != 0 {
			tr.perHourPct = tr.slope2 * 60 / tr.mean2 * 100
			switch {
			case math.Abs(tr.perHourPct) < flatWithin*100 || (len(xs2) > 2 && math.Abs(tr.slope2) < significant*tr.stderr2):
				tr.verdict = "flat"
			case tr.perHourPct > 0:
				tr.verdict = "GROWS"
			default:
				tr.verdict = "falls"
			}
		}
		out = append(out, tr)
	}
	return out
}

// trendTable renders the trends as a Markdown table.
func trendTable(ts []trend) string {
	var b strings.Builder
	b.WriteString("| figure | at load start | at end | min | max | slope / min, whole load | slope / min, second half | second half, 1 h at that slope | verdict |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, t := range ts {
		unit := ""
		if t.m.unit != "" {
			unit = " " + t.m.unit
		}
		slope := func(v float64, ok bool) string {
			if !ok {
				return "n/a"
			}
			return fmt.Sprintf("%+.3f%s", v, unit)
		}
		hour := "n/a"
		if t.ok2 {
			hour = fmt.Sprintf("%+.2f %%", t.perHourPct)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t.m.name,
			num(t.first, t.m), num(t.last, t.m), num(t.min, t.m), num(t.max, t.m),
			slope(t.slope, t.ok), slope(t.slope2, t.ok2), hour, t.verdict)
	}
	return b.String()
}

// num formats a value of m: MiB with one decimal, counts whole.
func num(v float64, m metric) string {
	if math.IsInf(v, 0) {
		return "n/a"
	}
	if m.unit == "MiB" {
		return fmt.Sprintf("%.1f MiB", v)
	}
	return fmt.Sprintf("%.0f", v)
}
