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
	var w histWire
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
