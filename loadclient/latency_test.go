package loadclient

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLatencyConstants(t *testing.T) {
	if e := bits.Len64(LatencyMin) - 1; e != minExp {
		t.Fatalf("⌊log2 LatencyMin⌋ = %d; minExp = %d", e, minExp)
	}
	if e := bits.Len64(LatencyMax) - 1; e != maxExp {
		t.Fatalf("⌊log2 LatencyMax⌋ = %d; maxExp = %d", e, maxExp)
	}
	if _, hi := bucketRange(numBuckets - 1); hi != 1<<(maxExp+1)-1 || bucketOf(LatencyMax) >= numBuckets {
		t.Fatalf("the last bucket ends at %d; bucketOf(LatencyMax) = %d of %d buckets", hi, bucketOf(LatencyMax), numBuckets)
	}
}

// TestLatencyBuckets walks every bucket: its range is contiguous with the next, every
// value in it maps to it, and its midpoint is within 1/256 of them all.
func TestLatencyBuckets(t *testing.T) {
	first := bucketOf(LatencyMin)
	for b := first; b < numBuckets; b++ {
		lo, hi := bucketRange(b)
		if b > first {
			if _, prevHi := bucketRange(b - 1); prevHi+1 != lo {
				t.Fatalf("bucket %d starts at %d; bucket %d ends at %d", b, lo, b-1, prevHi)
			}
		}
		for _, v := range []int64{lo, hi} {
			if v < LatencyMin || v > LatencyMax {
				continue
			}
			if got := bucketOf(v); got != b {
				t.Fatalf("bucketOf(%d) = %d; want %d (range [%d,%d])", v, got, b, lo, hi)
			}
		}
		mid := lo + (hi-lo+1)/2
		if err := float64(max(mid-lo, hi-mid)) / float64(lo); err > 1.0/256 {
			t.Fatalf("bucket %d [%d,%d]: midpoint %d is %.4f%% off; want ≤ 0.39%%", b, lo, hi, mid, 100*err)
		}
	}
}

func TestLatencyClamp(t *testing.T) {
	var h LatencyHistogram
	for _, v := range []int64{math.MinInt64, -5, 0, 1, 999} {
		h.Record(v)
	}
	h.Record(LatencyMax + 1)
	h.Record(math.MaxInt64)
	if h.Count() != 7 || h.Min() != LatencyMin || h.Max() != LatencyMax {
		t.Fatalf("count %d, min %d, max %d; want 7, %d, %d", h.Count(), h.Min(), h.Max(), LatencyMin, LatencyMax)
	}
	if got := h.Quantile(0.5); got < LatencyMin || got > LatencyMin+LatencyMin/256 {
		t.Fatalf("median %d; want %d + 0.39%%", got, LatencyMin)
	}
}

func exactQuantile(sorted []int64, q float64) int64 {
	rank := max(int(math.Ceil(q*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

func TestLatencyQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dists := []struct {
		name string
		gen  func() float64
	}{
		{"uniform 1µs-10ms", func() float64 { return 1e3 + r.Float64()*(1e7-1e3) }},
		{"exponential mean 2ms", func() float64 { return 1e3 + r.ExpFloat64()*2e6 }},
		{"lognormal median 500µs", func() float64 { return 5e5 * math.Exp(1.5*r.NormFloat64()) }},
		{"bimodal 200µs and 80ms", func() float64 {
			if r.IntN(100) < 97 {
				return 2e5 + r.Float64()*1e4
			}
			return 8e7 + r.Float64()*1e7
		}},
		{"constant 5ms", func() float64 { return 5e6 }},
	}
	for _, d := range dists {
		var h LatencyHistogram
		vals := make([]int64, 100_000)
		for i := range vals {
			vals[i] = clampLatency(int64(d.gen()))
			h.Record(vals[i])
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
			want, got := exactQuantile(vals, q), h.Quantile(q)
			// The contract is 1%; the midpoint of a bucket is within 1/256 of its values.
			if err := math.Abs(float64(got-want)) / float64(want); err > 1.0/256 {
				t.Errorf("%s: Quantile(%v) = %d; want %d ± 0.39%% (off by %.3f%%)", d.name, q, got, want, 100*err)
			}
		}
		if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
			t.Errorf("%s: min %d, max %d; want %d, %d exactly", d.name, h.Min(), h.Max(), vals[0], vals[len(vals)-1])
		}
		var sum float64
		for _, v := range vals {
			sum += float64(v)
		}
		if want := sum / float64(len(vals)); math.Abs(h.Mean()-want) > 1e-9*want {
			t.Errorf("%s: mean %v; want %v", d.name, h.Mean(), want)
		}
	}
}

// TestLatencyQuantileExactForOneValue: quantiles stay within [Min, Max], so a histogram
// of one repeated value reports it exactly, whether below or above its bucket's midpoint.
func TestLatencyQuantileExactForOneValue(t *testing.T) {
	for _, v := range []int64{LatencyMin, 4_990_000, 5_000_000, LatencyMax} {
		var h LatencyHistogram
		for range 3 {
			h.Record(v)
		}
		for _, q := range []float64{0, 0.5, 0.99, 1} {
			if got := h.Quantile(q); got != v {
				t.Fatalf("only %d recorded: Quantile(%v) = %d", v, q, got)
			}
		}
	}
}

func TestLatencyEmpty(t *testing.T) {
	var h LatencyHistogram
	if h.Count() != 0 || h.Quantile(0.5) != 0 || h.Min() != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Fatalf("empty histogram: count %d, median %d, min %d, max %d, mean %v; want all 0",
			h.Count(), h.Quantile(0.5), h.Min(), h.Max(), h.Mean())
	}
	h.Record(7_000)
	if got := h.Quantile(math.NaN()); got != 7_000 {
		t.Fatalf("Quantile(NaN) = %d; want the minimum 7000", got)
	}
	if got := h.Quantile(2); got != 7_000 {
		t.Fatalf("Quantile(2) = %d; want the maximum 7000", got)
	}
	h.Reset()
	if h != (LatencyHistogram{}) {
		t.Fatalf("Reset left %d latencies", h.Count())
	}
}

func TestLatencyMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b, both, empty LatencyHistogram
	for range 10_000 {
		v := int64(r.ExpFloat64() * 1e6)
		a.Record(v)
		both.Record(v)
	}
	for range 5_000 {
		v := int64(r.ExpFloat64() * 5e7)
		b.Record(v)
		both.Record(v)
	}
	merged := a
	merged.Merge(&b)
	merged.Merge(&empty)
	if merged != both {
		t.Fatalf("merge: count %d, min %d, max %d, mean %v; recording both: %d, %d, %d, %v",
			merged.Count(), merged.Min(), merged.Max(), merged.Mean(), both.Count(), both.Min(), both.Max(), both.Mean())
	}
	empty.Merge(&b)
	if empty != b {
		t.Fatalf("merging into an empty histogram differs from the source")
	}
}

// TestLatencyMeanExact records more than 2^64 ns in total.
func TestLatencyMeanExact(t *testing.T) {
	var h LatencyHistogram
	h.RecordCorrected(LatencyMax, 1) // 1e11 values averaging 5e10: a sum of 5e21
	if want := float64(LatencyMax) / 2; math.Abs(h.Mean()-want) > 1e-9*want {
		t.Fatalf("mean %v; want %v", h.Mean(), want)
	}
}

func TestLatencyRecordCorrected(t *testing.T) {
	naive := func(h *LatencyHistogram, v, interval int64) {
		v = clampLatency(v)
		h.Record(v)
		if interval <= 0 {
			return
		}
		for missing := v - interval; missing >= interval; missing -= interval {
			h.Record(missing)
		}
	}
	f := func(v, interval int64) {
		t.Helper()
		var got, want LatencyHistogram
		got.Record(3_000) // a value already there, so min is tested too
		want.Record(3_000)
		got.RecordCorrected(v, interval)
		naive(&want, v, interval)
		if got != want {
			t.Fatalf("RecordCorrected(%d, %d): count %d, min %d, max %d, mean %v; the loop gives %d, %d, %d, %v",
				v, interval, got.Count(), got.Min(), got.Max(), got.Mean(), want.Count(), want.Min(), want.Max(), want.Mean())
		}
	}
	f(5_000_000, 0)
	f(5_000_000, -1)
	f(5_000_000, 5_000_001) // interval longer than the latency
	f(5_000_000, 2_500_001) // one step short of a synthetic value
	f(5_000_000, 2_500_000) // exactly one
	f(5_000_000, 1_000_000)
	f(5_000_000, 333)
	f(5_000_000, 1) // five million values: several per bucket, some below LatencyMin
	f(2_500, 10)    // synthetic values below LatencyMin are clamped
	f(500, 10)      // the latency itself is clamped first
	f(LatencyMax+5, 30_000_000_000)
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		v := r.Int64N(100_000_000)
		f(v, max(v/r.Int64N(20_000)+1, 1))
	}
}

func TestLatencyAllocs(t *testing.T) {
	h := new(LatencyHistogram)
	var v int64
	if allocs := testing.AllocsPerRun(1000, func() { v += 997; h.Record(v) }); allocs != 0 {
		t.Fatalf("Record allocates %v times; want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { h.RecordCorrected(50_000_000, 1_000) }); allocs != 0 {
		t.Fatalf("RecordCorrected allocates %v times; want 0", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { h.Quantile(0.99) }); allocs != 0 {
		t.Fatalf("Quantile allocates %v times; want 0", allocs)
	}
}
