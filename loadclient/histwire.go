package loadclient

import "fmt"

// histWire is a LatencyHistogram as it travels from a -procs child to its parent: only the
// non-empty buckets, as pairs of index and count, so an idle histogram is a few bytes and a
// busy one a few KiB instead of 28 KiB. latency.go has no serialization of its own; this
// file reads its fields from inside the package rather than change it.
type histWire struct {
	Count   uint64      `json:"n"`
	SumHi   uint64      `json:"sh,omitempty"`
	SumLo   uint64      `json:"sl"`
	Min     int64       `json:"min"`
	Max     int64       `json:"max"`
	Buckets [][2]uint64 `json:"b,omitempty"` // bucket index, count
}

// wireOf returns h in its wire form.
func wireOf(h *LatencyHistogram) histWire {
	w := histWire{Count: h.count, SumHi: h.sumHi, SumLo: h.sumLo, Min: h.min, Max: h.max}
	for b, c := range h.counts {
		if c != 0 {
			w.Buckets = append(w.Buckets, [2]uint64{uint64(b), c})
		}
	}
	return w
}

// mergeInto adds the latencies of w to h, as LatencyHistogram.Merge would.
func (w *histWire) mergeInto(h *LatencyHistogram) error {
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
