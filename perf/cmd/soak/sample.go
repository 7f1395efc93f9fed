package main

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// required are the series a sample must have to count.
var required = []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes",
	"go_threads", "hongbao_connections", "go_gc_duration_seconds_count"}

// rates returns the SHAKEs a second and the server's CPU share (in %) from
// prev to s; ok is false unless both read /metrics.
func rates(prev, s *harness.Sample) (shakes, cpu float64, ok bool) {
	if prev == nil || prev.Metrics == nil || s.Metrics == nil {
		return 0, 0, false
	}
	dt := s.At.Sub(prev.At).Seconds()
	return (s.Shakes() - prev.Shakes()) / dt, (s.CPU - prev.CPU).Seconds() / dt * 100, true
}

// metric is one figure the report follows; its value is divided by scale
// for the report.
type metric struct {
	name, unit string
	scale      float64
	value      func(*harness.Sample) float64
}

// text formats v, in the report's unit: MiB with one decimal, counts whole.
func (m metric) text(v float64) string {
	switch {
	case math.IsInf(v, 0):
		return "n/a"
	case m.unit != "":
		return fmt.Sprintf("%.1f %s", v, m.unit)
	}
	return fmt.Sprintf("%.0f", v)
}

// columns name row's cells.
func columns() []string {
	var out []string
	for _, m := range followed {
		out = append(out, m.name)
	}
	return append(out, "SHAKE/s", "server CPU %")
}

// row is the sample's followed figures, and its rates since prev.
func row(s, prev *harness.Sample) []string {
	var out []string
	for _, m := range followed {
		out = append(out, m.text(m.value(s)/m.scale))
	}
	rate, cpu := "", ""
	if r, c, ok := rates(prev, s); ok {
		rate, cpu = fmt.Sprintf("%.0f", r), fmt.Sprintf("%.0f", c)
	}
	if s.Err != nil {
		rate += " (error: " + s.Err.Error() + ")"
	}
	return append(out, rate, cpu)
}

func series(name string) func(*harness.Sample) float64 {
	return func(s *harness.Sample) float64 { return s.Metric(name) }
}

// followed are the figures whose slopes the report gives.
var followed = []metric{
	{"RSS", "MiB", 1 << 20, func(s *harness.Sample) float64 { return float64(s.RSS) }},
	{"Go heap in use", "MiB", 1 << 20, series("go_memstats_heap_inuse_bytes")},
	{"goroutines", "", 1, series("go_goroutines")},
	{"open descriptors", "", 1, func(s *harness.Sample) float64 { return float64(s.FDs) }},
	{"connections", "", 1, series("hongbao_connections")},
	{"goroutine stacks", "MiB", 1 << 20, series("go_memstats_stack_inuse_bytes")},
	{"OS threads", "", 1, series("go_threads")},
}

// writeSamples writes the samples as CSV, times in seconds since the load's
// start (negative during the ramp).
func writeSamples(path string, samples []harness.Sample, loadStart time.Time) error {
	return harness.WriteFile(path, func(w io.Writer) {
		fmt.Fprintln(w, "t_s,rss_bytes,heap_inuse_bytes,heap_alloc_bytes,stack_inuse_bytes,goroutines,open_fds,threads,connections,cpu_s,shakes_total,gcs_total,scrape_ms,error")
		for i := range samples {
			s := &samples[i]
			fmt.Fprintf(w, "%.3f,%d,%.0f,%.0f,%.0f,%.0f,%d,%.0f,%.0f,%.2f,%.0f,%.0f,%.1f,%s\n", s.At.Sub(loadStart).Seconds(),
				s.RSS, s.Metric("go_memstats_heap_inuse_bytes"), s.Metric("go_memstats_heap_alloc_bytes"), s.Metric("go_memstats_stack_inuse_bytes"),
				s.Metric("go_goroutines"), s.FDs, s.Metric("go_threads"), s.Metric("hongbao_connections"),
				s.CPU.Seconds(), s.Shakes(), s.Metric("go_gc_duration_seconds_count"), harness.Millis(s.Scrape), harness.CSVError(s.Err))
		}
	})
}
