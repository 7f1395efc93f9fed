package loadclient

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestHistWireRoundTrip checks that a histogram that travels from a child to its parent
// merges as the histogram itself would.
func TestHistWireRoundTrip(t *testing.T) {
	var h, want LatencyHistogram
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		h.Record(int64(rng.ExpFloat64() * 1e6))
	}
	h.RecordCorrected(5e9, 1e6)
	want.Merge(&h)
	want.Merge(&h)

	b, err := json.Marshal(wireOf(&h))
	if err != nil {
		t.Fatal(err)
	}
	var w LatencyBuckets
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	got := new(LatencyHistogram)
	got.Merge(&h)
	if err := w.mergeInto(got); err != nil {
		t.Fatal(err)
	}
	if *got != want {
		t.Errorf("merged through the wire: count %d mean %v max %v; want count %d mean %v max %v",
			got.Count(), got.Mean(), got.Max(), want.Count(), want.Mean(), want.Max())
	}
	t.Logf("%d values in %d bytes of JSON", h.Count(), len(b))

	w.Count++
	if err := w.mergeInto(new(LatencyHistogram)); err == nil {
		t.Error("a wire histogram whose count disagrees with its buckets merged without error")
	}
	w.Count--
	w.Buckets[0][0] = numBuckets
	if err := w.mergeInto(new(LatencyHistogram)); err == nil {
		t.Error("a bucket index out of range merged without error")
	}
}

func TestSplitRange(t *testing.T) {
	f := func(r Range, k int, want string) {
		t.Helper()
		got := ""
		for _, p := range splitRange(r, k) {
			got += p.String() + " "
		}
		if got != want {
			t.Errorf("splitRange(%v, %d): got %q; want %q", r, k, got, want)
		}
	}
	f(Range{1, 10}, 3, "1-4 5-7 8-10 ")
	f(Range{5, 6}, 4, "5-5 6-6 ")
	f(Range{1, 1}, 1, "1-1 ")
}

// Reports of two processes merge into the report of one that recorded
// both's latencies, quantiles included; the bucket bounds LatencyBuckets
// documents are the histogram's.
func TestMergeLatency(t *testing.T) {
	var a, b, all LatencyHistogram
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		v := int64(rng.ExpFloat64() * 1e6)
		if i%3 == 0 {
			v *= 40 // one process much slower: its tail is the merged p99
			b.Record(v)
		} else {
			a.Record(v)
		}
		all.Record(v)
	}
	var rs []LatencyReport
	for _, h := range []*LatencyHistogram{&a, &b, new(LatencyHistogram)} {
		js, _ := json.Marshal(latencyOf(h))
		var r LatencyReport
		if err := json.Unmarshal(js, &r); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	got, err := MergeLatency(rs)
	if err != nil {
		t.Fatal(err)
	}
	if want := latencyOf(&all); got.Count != want.Count || got.P50 != want.P50 || got.P99 != want.P99 || got.P999 != want.P999 || got.Max != want.Max || got.Mean != want.Mean {
		t.Fatalf("merged %+v; want %+v", got, want)
	}
	if _, err := MergeLatency([]LatencyReport{{Count: 3}}); err == nil {
		t.Fatal("a report with latencies and no buckets merged")
	}
	for bk := bucketOf(LatencyMin); bk < numBuckets; bk++ {
		e, k := bk/128+9, int64(bk%128)
		lo := (128 + k) << (e - 7)
		if l, h := bucketRange(bk); l != lo || h != lo+1<<(e-7)-1 {
			t.Fatalf("bucket %d: [%d, %d]; the documented bounds say [%d, %d]", bk, l, h, lo, lo+1<<(e-7)-1)
		}
	}
}
