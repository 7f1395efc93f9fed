package runlog

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// Bucket is one cumulative bucket of a Prometheus histogram: Count
// observations were at most Le.
type Bucket struct {
	Le    float64
	Count float64
}

// Histogram returns the buckets of histogram name from a scrape given as
// series → value (name_bucket{le="…"} series), ordered by Le, +Inf last; nil
// when the scrape has none. Series with labels besides le are not supported.
func Histogram(scrape map[string]float64, name string) []Bucket {
	prefix := name + `_bucket{le="`
	var h []Bucket
	for series, v := range scrape {
		le, ok := strings.CutPrefix(series, prefix)
		if !ok {
			continue
		}
		le, ok = strings.CutSuffix(le, `"}`)
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(le, 64) // ParseFloat takes "+Inf"
		if err != nil {
			continue
		}
		h = append(h, Bucket{Le: x, Count: v})
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Le < h[j].Le })
	return h
}

// Delta returns the observations of to that came after from, bucket by
// bucket: the histogram of an interval from two scrapes of the same
// histogram (the same bounds). A bucket missing from from counts as empty.
func Delta(from, to []Bucket) []Bucket {
	base := map[float64]float64{}
	for _, b := range from {
		base[b.Le] = b.Count
	}
	out := make([]Bucket, len(to))
	for i, b := range to {
		out[i] = Bucket{Le: b.Le, Count: b.Count - base[b.Le]}
	}
	return out
}

// Total returns the number of observations of h.
func Total(h []Bucket) float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// Quantile returns the upper bound of the bucket that holds the q-quantile of
// h: the quantile is at most that; +Inf when it is beyond the last finite
// bound, NaN when h is empty.
func Quantile(h []Bucket, q float64) float64 {
	n := Total(h)
	if n <= 0 {
		return math.NaN()
	}
	rank := math.Ceil(q * n)
	for _, b := range h {
		if b.Count >= rank {
			return b.Le
		}
	}
	return math.Inf(1)
}

// Max returns the upper bound of the highest bucket that got an observation
// (NaN when h is empty).
func Max(h []Bucket) float64 {
	return Quantile(h, 1)
}
