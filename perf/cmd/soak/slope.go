package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// leastSquares returns the slope of the least-squares line through the
// points (xs[i], ys[i]) and its standard error (0 with two points or a
// perfect fit); ok is false with fewer than two distinct xs.
func leastSquares(xs, ys []float64) (slope, stderr float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0, 0, false
	}
	var mx, my, sxy, sxx, rss float64
	for i := range xs {
		mx, my = mx+xs[i]/n, my+ys[i]/n
	}
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	slope = sxy / sxx
	for i := range xs {
		r := ys[i] - my - slope*(xs[i]-mx)
		rss += r * r
	}
	if len(xs) > 2 {
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

// trend is one followed figure over the load, in the report's unit.
type trend struct {
	m                 metric
	first, last       float64
	min, max, mean2   float64 // mean2: over the second half
	slope, slope2     float64 // per minute: whole load, second half
	ok, ok2           bool
	samples, samples2 int
	stderr2           float64 // slope2's standard error
	perHourPct        float64 // slope2 × 60 / mean2, in %
	verdict           string  // flat, GROWS, falls, or ? without enough samples
}

// trends computes each followed figure's slopes over the samples that
// succeeded during the load (from loadStart for dur) and its second half.
func trends(samples []harness.Sample, loadStart time.Time, dur time.Duration) []trend {
	var out []trend
	for _, m := range followed {
		tr := trend{m: m, min: math.Inf(1), max: math.Inf(-1), verdict: "?"}
		var xs, ys, xs2, ys2 []float64
		for i := range samples {
			s := &samples[i]
			x := s.At.Sub(loadStart).Minutes()
			if s.Err != nil || x < 0 || x > dur.Minutes() {
				continue
			}
			y := m.value(s) / m.scale
			xs, ys = append(xs, x), append(ys, y)
			if x >= dur.Minutes()/2 {
				xs2, ys2 = append(xs2, x), append(ys2, y)
				tr.mean2 += y
			}
			tr.min, tr.max = math.Min(tr.min, y), math.Max(tr.max, y)
		}
		tr.samples, tr.samples2 = len(xs), len(xs2)
		if len(ys) > 0 {
			tr.first, tr.last = ys[0], ys[len(ys)-1]
		}
		tr.mean2 /= float64(max(len(ys2), 1))
		tr.slope, _, tr.ok = leastSquares(xs, ys)
		tr.slope2, tr.stderr2, tr.ok2 = leastSquares(xs2, ys2)
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

// trendTable is the trends as a table.
func trendTable(ts []trend) *harness.Table {
	t := &harness.Table{Right: true, Head: []string{"figure", "at load start", "at end", "min", "max", "slope / min, whole load", "slope / min, second half", "second half, 1 h at that slope", "verdict"}}
	for _, tr := range ts {
		slope := func(v float64, ok bool) string {
			if !ok {
				return "n/a"
			}
			return strings.TrimSpace(fmt.Sprintf("%+.3f %s", v, tr.m.unit))
		}
		hour := "n/a"
		if tr.ok2 {
			hour = fmt.Sprintf("%+.2f %%", tr.perHourPct)
		}
		t.Add(tr.m.name, tr.m.text(tr.first), tr.m.text(tr.last), tr.m.text(tr.min), tr.m.text(tr.max), slope(tr.slope, tr.ok), slope(tr.slope2, tr.ok2), hour, tr.verdict)
	}
	return t
}
