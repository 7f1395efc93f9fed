package runlog

import (
	"bufio"
	"io"
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

// ParseMetrics reads a Prometheus text exposition into series → value, the
// series written as in the exposition (name{labels}). Blank lines and
// comments (# HELP, # TYPE) are skipped, and so is a line whose value does
// not parse; a trailing timestamp is dropped.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The series ends at the closing brace of its labels (a label
		// value may hold spaces), else at the first blank.
		end := strings.IndexAny(line, "{ \t")
		if end < 0 {
			continue
		}
		if line[end] == '{' {
			rb := strings.LastIndexByte(line, '}')
			if rb < end {
				continue
			}
			end = rb + 1
		}
		fields := strings.Fields(line[end:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		m[line[:end]] = v
	}
	return m, sc.Err()
}

// label is one name="value" pair of a series.
type label struct{ Name, Value string }

// splitSeries splits name{a="x",b="y"} into its name and labels; ok is false
// when the labels do not parse. The exposition escapes a label value as Go
// quotes a string (\\, \", \n).
func splitSeries(series string) (name string, labels []label, ok bool) {
	name, rest, found := strings.Cut(series, "{")
	if !found {
		return series, nil, true
	}
	rest, ok = strings.CutSuffix(rest, "}")
	for ok && strings.TrimSpace(rest) != "" {
		k, v, found := strings.Cut(rest, "=")
		q, err := strconv.QuotedPrefix(strings.TrimSpace(v))
		if !found || err != nil || q[0] != '"' {
			return name, nil, false
		}
		val, _ := strconv.Unquote(q)
		labels = append(labels, label{strings.TrimSpace(k), val})
		rest = strings.TrimPrefix(strings.TrimSpace(strings.TrimSpace(v)[len(q):]), ",")
	}
	return name, labels, ok
}

// Histogram returns the buckets of histogram name from a scrape given as
// series → value (name_bucket{…,le="…"} series), ordered by Le, +Inf last;
// nil when the scrape has none. Series with labels besides le are added up
// bucket by bucket, so a histogram labelled by, say, request type gives the
// histogram of every observation, as the same histogram without the label
// does. HistogramWhere picks some of the series.
func Histogram(scrape map[string]float64, name string) []Bucket {
	return HistogramWhere(scrape, name, nil)
}

// HistogramWhere is Histogram of the series that carry every label of want
// with its value, added up over the other labels: HistogramWhere(m,
// "hongbao_latency_seconds", map[string]string{"type": "shake"}) is the
// SHAKEs' latency. nil when no series matches (an unlabelled histogram has
// no type="shake" series).
func HistogramWhere(scrape map[string]float64, name string, want map[string]string) []Bucket {
	sums := map[float64]float64{}
	for series, v := range scrape {
		n, labels, ok := splitSeries(series)
		if !ok || n != name+"_bucket" {
			continue
		}
		le, matched := "", 0
		for _, l := range labels {
			if l.Name == "le" {
				le = l.Value
			} else if w, in := want[l.Name]; in && w == l.Value {
				matched++
			}
		}
		if le == "" || matched < len(want) {
			continue
		}
		x, err := strconv.ParseFloat(le, 64) // ParseFloat takes "+Inf"
		if err != nil {
			continue
		}
		sums[x] += v
	}
	if len(sums) == 0 {
		return nil
	}
	h := make([]Bucket, 0, len(sums))
	for le, c := range sums {
		h = append(h, Bucket{Le: le, Count: c})
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
