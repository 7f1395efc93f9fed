package runlog

import (
	"math"
	"slices"
	"strings"
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

// The server's /metrics in both forms: hongbao_latency_seconds without
// labels, and labelled by request type, with # HELP and # TYPE lines.
const (
	expositionPlain = `# HELP hongbao_shake_total SHAKEs answered, by result.
# TYPE hongbao_shake_total counter
hongbao_shake_total{result="got"} 7
# TYPE hongbao_latency_seconds histogram
hongbao_latency_seconds_bucket{le="0.000128"} 50
hongbao_latency_seconds_bucket{le="0.000256"} 90
hongbao_latency_seconds_bucket{le="+Inf"} 100
hongbao_latency_seconds_sum 0.0125
hongbao_latency_seconds_count 100
go_goroutines 12
`
	expositionTyped = `# HELP hongbao_latency_seconds Time inside the server, ingress to egress, by request type.
# TYPE hongbao_latency_seconds histogram
hongbao_latency_seconds_bucket{type="shake",le="0.000128"} 40
hongbao_latency_seconds_bucket{type="shake",le="0.000256"} 70
hongbao_latency_seconds_bucket{type="shake",le="+Inf"} 80
hongbao_latency_seconds_sum{type="shake"} 0.01
hongbao_latency_seconds_count{type="shake"} 80

hongbao_latency_seconds_bucket{type="open",le="0.000128"} 10
hongbao_latency_seconds_bucket{type="open",le="0.000256"} 20
hongbao_latency_seconds_bucket{type="open",le="+Inf"} 20
hongbao_latency_seconds_sum{type="open"} 0.0025
hongbao_latency_seconds_count{type="open"} 20
# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 12 1700000000000
`
)

func TestParseMetricsBothForms(t *testing.T) {
	plain, err := ParseMetrics(strings.NewReader(expositionPlain))
	if err != nil {
		t.Fatal(err)
	}
	typed, err := ParseMetrics(strings.NewReader(expositionTyped))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]float64{plain, typed} {
		if m["go_goroutines"] != 12 {
			t.Fatalf("go_goroutines = %v; want 12 (comments skipped, timestamp dropped): %v", m["go_goroutines"], m)
		}
		for k := range m {
			if strings.HasPrefix(k, "#") {
				t.Fatalf("comment line parsed as series %q", k)
			}
		}
	}
	if v := plain[`hongbao_shake_total{result="got"}`]; v != 7 {
		t.Fatalf("labelled counter = %v; want 7", v)
	}
	if v := typed[`hongbao_latency_seconds_count{type="shake"}`]; v != 80 {
		t.Fatalf("typed count = %v; want 80", v)
	}

	// Every answer: the plain histogram as it is, the typed one summed
	// over the types; both hold the same 100 observations here.
	want := []Bucket{{0.000128, 50}, {0.000256, 90}, {math.Inf(1), 100}}
	for name, m := range map[string]map[string]float64{"plain": plain, "typed": typed} {
		if h := Histogram(m, "hongbao_latency_seconds"); !slices.Equal(h, want) {
			t.Fatalf("%s: Histogram = %v; want %v", name, h, want)
		}
	}
	shake := HistogramWhere(typed, "hongbao_latency_seconds", map[string]string{"type": "shake"})
	if want := []Bucket{{0.000128, 40}, {0.000256, 70}, {math.Inf(1), 80}}; !slices.Equal(shake, want) {
		t.Fatalf("SHAKE histogram = %v; want %v", shake, want)
	}
	if q := Quantile(shake, 0.99); q != math.Inf(1) {
		t.Fatalf("SHAKE p99 = %v; want +Inf (80·0.99 → rank 80, beyond 0.000256)", q)
	}
	if h := HistogramWhere(plain, "hongbao_latency_seconds", map[string]string{"type": "shake"}); h != nil {
		t.Fatalf("SHAKE histogram of the unlabelled form = %v; want nil", h)
	}
}

func TestSplitSeries(t *testing.T) {
	name, labels, ok := splitSeries(`h_bucket{le="+Inf", type="a \"b\", c"}`)
	if !ok || name != "h_bucket" || len(labels) != 2 || labels[0] != (label{"le", "+Inf"}) || labels[1] != (label{"type", `a "b", c`}) {
		t.Fatalf("splitSeries = %q %q %v", name, labels, ok)
	}
	if _, _, ok := splitSeries(`h{le="1"`); ok {
		t.Fatal("unclosed labels parsed")
	}
}
