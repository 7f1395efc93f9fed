package loadclient

import (
	"math"
	"math/bits"
)

// Latency range and resolution. A value v in [2^e, 2^(e+1)) falls in one of subCount
// equal buckets of width 2^e/subCount, so a bucket is at most 1/128 of its values wide and
// its midpoint, which Quantile reports, is within 1/256 (0.4%) of every value in it.
const (
	LatencyMin = 1_000           // ns: 1 µs; smaller values are recorded as LatencyMin
	LatencyMax = 100_000_000_000 // ns: 100 s; larger values are recorded as LatencyMax

	subBits  = 7
	subCount = 1 << subBits // 128 buckets per power of two: ≤ 1% error, see above
	minExp   = 9            // ⌊log2 LatencyMin⌋: 2^9 = 512 ≤ 1,000 < 1,024
	maxExp   = 36           // ⌊log2 LatencyMax⌋: 2^36 ≈ 6.9e10 ≤ 1e11 < 2^37

	numBuckets = (maxExp - minExp + 1) * subCount // 3,584 counters: 28 KiB
)

// LatencyHistogram is an HDR-style histogram of latencies in ns from LatencyMin to
// LatencyMax (values outside are clamped) with log-linear buckets: quantiles are within
// 0.4% of the exact ones, Min, Max and Mean are exact (of the clamped values).
//
// It is not safe for concurrent use: each event loop owns one and records without locks
// or atomics; a reporter merges them after the loops have handed them over (or stopped).
// Record does not allocate. The zero value is an empty histogram ready to use; it is
// 28 KiB, so keep it behind a pointer.
//
// Coordinated omission: measure each latency from the send's scheduled time (the
// Schedule's atNs), not from when it actually went out, so a stalled client cannot hide
// the stall. Where only actual send times exist, RecordCorrected fills in the sends the
// stall held back, as HdrHistogram's recordValueWithExpectedInterval does.
type LatencyHistogram struct {
	counts   [numBuckets]uint64
	count    uint64
	sumHi    uint64 // the sum of the recorded values is sumHi·2^64 + sumLo: exact Mean
	sumLo    uint64
	min, max int64 // valid when count > 0
}

func clampLatency(v int64) int64 {
	return min(max(v, LatencyMin), LatencyMax)
}

// bucketOf returns the bucket of v in [LatencyMin, LatencyMax]. Buckets below
// bucketOf(LatencyMin) = 122 stay empty; keeping them makes the index a shift and a
// subtraction.
func bucketOf(v int64) int {
	e := bits.Len64(uint64(v)) - 1
	return (e-minExp)<<subBits + int(v>>(e-subBits)) - subCount
}

// bucketRange returns the smallest and the largest value of bucket b.
func bucketRange(b int) (lo, hi int64) {
	shift := b>>subBits + minExp - subBits
	lo = int64(b&(subCount-1)+subCount) << shift
	return lo, lo + 1<<shift - 1
}

// Record adds one latency of v ns.
func (h *LatencyHistogram) Record(v int64) {
	v = clampLatency(v)
	h.counts[bucketOf(v)]++
	h.count++
	h.addSum(0, uint64(v))
	if h.count == 1 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// RecordCorrected records v and, when v ≥ 2·expectedInterval > 0, the latencies the sends
// queued behind it would have seen: v−I, v−2I, … down to the last one ≥ I (I =
// expectedInterval), like HdrHistogram's recordValueWithExpectedInterval. v is clamped
// first. It takes O(min(v/I, buckets)) time, so a 100 s stall at a 1 µs interval does not
// cost 10^8 steps.
func (h *LatencyHistogram) RecordCorrected(v, expectedInterval int64) {
	h.Record(v)
	v = clampLatency(v)
	step := expectedInterval
	if step <= 0 || v/step < 2 {
		return
	}
	n := v/step - 1 // the terms v − k·step for k = 1..n are all ≥ step

	// Terms below LatencyMin are clamped: k ≥ kLow are those.
	kLow := (v-LatencyMin)/step + 1
	nHigh := min(n, kLow-1)
	if nLow := n - nHigh; nLow > 0 {
		h.counts[bucketOf(LatencyMin)] += uint64(nLow)
		hi, lo := bits.Mul64(uint64(nLow), LatencyMin)
		h.addSum(hi, lo)
		h.min = LatencyMin
	}
	if nHigh <= 0 {
		h.count += uint64(n)
		return
	}
	// One bucket per iteration: the run of k whose terms share the bucket of v − k·step.
	for k := int64(1); k <= nHigh; {
		b := bucketOf(v - k*step)
		lo, _ := bucketRange(b)
		last := min((v-lo)/step, nHigh)
		h.counts[b] += uint64(last - k + 1)
		k = last + 1
	}
	// Σ(v − k·step) over k = 1..nHigh = nHigh·(first + last)/2, even, in 128 bits.
	hi, lo := bits.Mul64(uint64(nHigh), uint64(2*v-(nHigh+1)*step))
	h.addSum(hi>>1, lo>>1|hi<<63)
	h.min = min(h.min, v-nHigh*step)
	h.count += uint64(n)
}

func (h *LatencyHistogram) addSum(hi, lo uint64) {
	var carry uint64
	h.sumLo, carry = bits.Add64(h.sumLo, lo, 0)
	h.sumHi += hi + carry
}

// Merge adds the latencies recorded in other to h; other is unchanged. The result equals
// recording both streams into one histogram.
func (h *LatencyHistogram) Merge(other *LatencyHistogram) {
	if other.count == 0 {
		return
	}
	for b, c := range other.counts {
		h.counts[b] += c
	}
	if h.count == 0 || other.min < h.min {
		h.min = other.min
	}
	h.max = max(h.max, other.max)
	h.count += other.count
	h.addSum(other.sumHi, other.sumLo)
}

// Reset empties h.
func (h *LatencyHistogram) Reset() {
	*h = LatencyHistogram{}
}

// AtMost returns how many recorded latencies are at most ns, to the resolution of the
// buckets: a bucket counts once ns reaches its largest value.
func (h *LatencyHistogram) AtMost(ns int64) uint64 {
	if ns < LatencyMin {
		return 0
	}
	last := bucketOf(min(ns, LatencyMax))
	if _, hi := bucketRange(last); hi > ns {
		last--
	}
	var n uint64
	for _, c := range h.counts[:last+1] {
		n += c
	}
	return n
}

// Count returns the number of latencies recorded.
func (h *LatencyHistogram) Count() uint64 { return h.count }

// Min returns the smallest latency recorded, or 0 if none.
func (h *LatencyHistogram) Min() int64 { return h.min }

// Max returns the largest latency recorded, or 0 if none.
func (h *LatencyHistogram) Max() int64 { return h.max }

// Mean returns the mean latency in ns, or 0 if none.
func (h *LatencyHistogram) Mean() float64 {
	if h.count == 0 {
		return 0
	}
	return (float64(h.sumHi)*(1<<64) + float64(h.sumLo)) / float64(h.count)
}

// Quantile returns the latency at quantile q in [0, 1] (q is clamped; NaN counts as 0):
// the value of rank ⌈q·Count⌉ to within 0.4%, Min for q = 0 and Max for q = 1 exactly;
// 0 if none. It scans the buckets: for reports, not per send.
func (h *LatencyHistogram) Quantile(q float64) int64 {
	if h.count == 0 {
		return 0
	}
	if !(q > 0) {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := max(uint64(math.Ceil(q*float64(h.count))), 1)
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen >= rank {
			lo, hi := bucketRange(b)
			return min(max(lo+(hi-lo+1)/2, h.min), h.max)
		}
	}
	return h.max // rank rounded above count for count beyond 2^53
}
