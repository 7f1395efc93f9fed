package loadclient

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// reporter turns the cumulative figures polled once a second into the live line, the
// timeline and the /metrics counters. Only drive calls tick; the control server reads last
// under mu.
type reporter struct {
	cfg     *Config
	startNs int64
	rt      *rates
	users   int                                // of this process, or of all children
	lagNs   int64                              // ticks come this long after each whole second of the run
	out     io.Writer                          // nil: no live line
	onTick  func(*counters, *LatencyHistogram) // a -procs child's report to its parent

	prev   counters
	prevNs int64
	rows   []timelineRow
	maxUp  int64

	mu     sync.Mutex
	last   counters
	shakes LatencyHistogram // every SHAKE's latency so far, for /metrics
}

// timelineRow is one second of the run; rates are per second over the tick's interval.
type timelineRow struct {
	T           float64 // seconds since the start
	Up, Pending int64
	Target      uint32
	Sent        float64 // SHAKEs sent
	Answered    float64 // SHAKEs answered
	Got         float64 // SHAKEs that got an envelope
	Opened      float64 // OPENs answered ok
	Pushes      float64 // ENVELOPE pushes
	P50, P99    int64   // SHAKE latency, ns
	P999        int64   // SHAKE p99.9, ns: the tail the charts draw beside p99
	Errors      [nErr]uint64
	Skipped     uint64
}

func newReporter(cfg *Config, startNs int64, rt *rates, out io.Writer) *reporter {
	if cfg.Quiet {
		out = nil
	}
	return &reporter{cfg: cfg, startNs: startNs, rt: rt, out: out, users: cfg.local.Len(), prevNs: time.Now().UnixNano()}
}

func (r *reporter) tick(now int64, cur *counters, live *LatencyHistogram) {
	dt := float64(now-r.prevNs) / 1e9
	if dt <= 0 {
		dt = 1
	}
	per := func(a, b uint64) float64 { return float64(a-b) / dt }
	p := &r.prev
	row := timelineRow{
		T:  float64(now-r.lagNs-r.startNs) / 1e9,
		Up: cur.Up, Pending: cur.Connecting,
		Target:   r.rt.at(now),
		Sent:     per(cur.Sent[reqShake], p.Sent[reqShake]),
		Answered: per(cur.answered(reqShake), p.answered(reqShake)),
		Got:      per(cur.Status[reqShake][1], p.Status[reqShake][1]),
		Opened:   per(cur.Status[reqOpen][0], p.Status[reqOpen][0]),
		Pushes:   per(cur.Pushes[pushEnvelope], p.Pushes[pushEnvelope]),
		P50:      live.Quantile(0.5), P99: live.Quantile(0.99), P999: live.Quantile(0.999),
		Skipped: cur.Skipped - p.Skipped,
	}
	for e := range nErr {
		row.Errors[e] = cur.Errors[e] - p.Errors[e]
	}
	r.rows = append(r.rows, row)
	r.maxUp = max(r.maxUp, cur.Up)
	r.prev, r.prevNs = *cur, now
	r.mu.Lock()
	r.last = *cur
	r.shakes.Merge(live)
	r.mu.Unlock()
	if r.out != nil {
		fmt.Fprintln(r.out, r.line(&row, cur))
	}
	if r.onTick != nil {
		r.onTick(cur, live)
	}
}

// line formats the live line: connections (with the ramp's progress), target and achieved
// SHAKE rate, envelopes got and opened a second, SHAKE latency of the last second, and the
// errors so far by class.
func (r *reporter) line(row *timelineRow, cur *counters) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.1fs up %d/%d", row.T, cur.Up, r.users)
	if cur.Connecting > 0 {
		fmt.Fprintf(&b, " (+%d connecting)", cur.Connecting)
	}
	fmt.Fprintf(&b, " | qps target %d sent %.0f answered %.0f | envelopes got %.0f/s opened %.0f/s | p50 %s p99 %s | err",
		row.Target, row.Sent, row.Answered, row.Got, row.Opened, ms(row.P50), ms(row.P99))
	for e := range nErr {
		fmt.Fprintf(&b, " %s %d", errNames[e], cur.Errors[e])
	}
	if cur.Skipped > 0 {
		fmt.Fprintf(&b, " | skipped %d", cur.Skipped)
	}
	return b.String()
}

// latest returns the figures of the last tick. Safe for concurrent use.
func (r *reporter) latest() counters {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// latencyBounds are the le bounds of /metrics' latency histogram, in seconds: the
// report's buckets are far finer (3,584), too many series for a scrape.
var latencyBounds = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}

// writeLatency writes the SHAKE latencies so far as a Prometheus histogram. Safe for
// concurrent use.
func (r *reporter) writeLatency(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &r.shakes
	fmt.Fprintf(w, "# HELP loadclient_shake_latency_seconds SHAKE latency from each request's scheduled send to its answer, to the last whole second.\n# TYPE loadclient_shake_latency_seconds histogram\n")
	for _, le := range latencyBounds {
		fmt.Fprintf(w, "loadclient_shake_latency_seconds_bucket{le=\"%g\"} %d\n", le, h.AtMost(int64(le*1e9)))
	}
	fmt.Fprintf(w, "loadclient_shake_latency_seconds_bucket{le=\"+Inf\"} %d\n", h.Count())
	fmt.Fprintf(w, "loadclient_shake_latency_seconds_sum %g\n", h.Mean()*float64(h.Count())/1e9)
	fmt.Fprintf(w, "loadclient_shake_latency_seconds_count %d\n", h.Count())
}

func ms(ns int64) string {
	return fmt.Sprintf("%.3fms", float64(ns)/1e6)
}

func (r *reporter) writeTimeline(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-timeline: %w", err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprint(w, "t_s,up,connecting,target_qps,sent_qps,answered_qps,envelopes_got_per_s,opened_per_s,pushes_per_s,p50_ms,p99_ms,p99_9_ms")
	for _, n := range errNames {
		fmt.Fprintf(w, ",err_%s", n)
	}
	fmt.Fprintln(w, ",skipped")
	for _, row := range r.rows {
		fmt.Fprintf(w, "%.3f,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%.3f,%.3f", row.T, row.Up, row.Pending, row.Target,
			row.Sent, row.Answered, row.Got, row.Opened, row.Pushes, float64(row.P50)/1e6, float64(row.P99)/1e6, float64(row.P999)/1e6)
		for _, e := range row.Errors {
			fmt.Fprintf(w, ",%d", e)
		}
		fmt.Fprintf(w, ",%d\n", row.Skipped)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("-timeline: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-timeline: %w", err)
	}
	return nil
}
