package runlog

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	from := map[string]float64{
		`lat_bucket{le="0.001"}`: 10,
		`lat_bucket{le="0.002"}`: 20,
		`lat_bucket{le="0.004"}`: 20,
		`lat_bucket{le="+Inf"}`:  20,
		`other_bucket{le="1"}`:   5,
		`lat_sum`:                1,
	}
	to := map[string]float64{
		`lat_bucket{le="0.002"}`: 110, // map order: Histogram sorts
		`lat_bucket{le="0.001"}`: 60,
		`lat_bucket{le="0.004"}`: 119,
		`lat_bucket{le="+Inf"}`:  120,
	}
	h := Delta(Histogram(from, "lat"), Histogram(to, "lat"))
	// Interval: 50 ≤ 1ms, 40 in (1, 2]ms, 9 in (2, 4]ms, 1 beyond.
	if n := Total(h); n != 100 {
		t.Fatalf("Total = %v; want 100", n)
	}
	f := func(q, want float64) {
		t.Helper()
		if got := Quantile(h, q); got != want {
			t.Fatalf("Quantile(%v) = %v; want %v", q, got, want)
		}
	}
	f(0.5, 0.001)
	f(0.51, 0.002)
	f(0.9, 0.002)
	f(0.99, 0.004)
	f(0.999, math.Inf(1))
	if m := Max(h); !math.IsInf(m, 1) {
		t.Fatalf("Max = %v; want +Inf", m)
	}
	if q := Quantile(nil, 0.5); !math.IsNaN(q) {
		t.Fatalf("Quantile of nothing = %v; want NaN", q)
	}
}
