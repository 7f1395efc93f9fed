package loadclient

import "fmt"

// LatencyBuckets is a LatencyHistogram as it travels from a -procs child to its parent and
// as the report keeps it (LatencyReport.Buckets): only the non-empty buckets, as pairs of
// index and count, so an idle histogram is a few bytes and a busy one a few KiB instead of
// 28 KiB. Bucket b holds the latencies from lo to hi ns, both included, where, with
// e = b/128 + 9 and k = b mod 128: lo = (128 + k)·2^(e−7) and hi = lo + 2^(e−7) − 1 (128
// buckets per power of two from 2^9 ns; `make million` merges them). Counts of
// the same bucket from several reports add up: MergeLatency.
type LatencyBuckets struct {
	Count   uint64      `json:"n"`
	SumHi   uint64      `json:"sh,omitempty"`
	SumLo   uint64      `json:"sl"`
	Min     int64       `json:"min"`
	Max     int64       `json:"max"`
	Buckets [][2]uint64 `json:"b,omitempty"` // bucket index, count
}

// wireOf returns h's buckets.
func wireOf(h *LatencyHistogram) LatencyBuckets {
	w := LatencyBuckets{Count: h.count, SumHi: h.sumHi, SumLo: h.sumLo, Min: h.min, Max: h.max}
	for b, c := range h.counts {
		if c != 0 {
			w.Buckets = append(w.Buckets, [2]uint64{uint64(b), c})
		}
	}
	return w
}

// mergeInto adds the latencies of w to h, as LatencyHistogram.Merge would.
func (w *LatencyBuckets) mergeInto(h *LatencyHistogram) error {
	var h2 LatencyHistogram
	var n uint64
	for _, bc := range w.Buckets {
		if bc[0] >= numBuckets {
			return fmt.Errorf("histogram bucket %d out of range [0, %d)", bc[0], numBuckets)
		}
		h2.counts[bc[0]] += bc[1]
		n += bc[1]
	}
	if n != w.Count {
		return fmt.Errorf("histogram buckets hold %d values; its count says %d", n, w.Count)
	}
	h2.count, h2.sumHi, h2.sumLo, h2.min, h2.max = w.Count, w.SumHi, w.SumLo, w.Min, w.Max
	h.Merge(&h2)
	return nil
}

// MergeLatency merges the latencies of several reports (each its Buckets) into one, its
// quantiles those of every latency recorded: a run split over several processes or machines
// has one honest p99. A report without buckets (an older load client) is an error.
func MergeLatency(rs []LatencyReport) (LatencyReport, error) {
	var h LatencyHistogram
	for i, r := range rs {
		if r.Buckets == nil {
			if r.Count == 0 {
				continue
			}
			return LatencyReport{}, fmt.Errorf("report %d has latencies but not their buckets", i)
		}
		if err := r.Buckets.mergeInto(&h); err != nil {
			return LatencyReport{}, fmt.Errorf("report %d: %w", i, err)
		}
	}
	return latencyOf(&h), nil
}
