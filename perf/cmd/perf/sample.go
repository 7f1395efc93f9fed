package main

import (
	"fmt"
	"io"
	"time"

	"hongbao/perf/internal/harness"
)

// writeSamples writes the server's samples as CSV, times in seconds since
// start.
func writeSamples(path string, samples []harness.Sample, start time.Time) error {
	return harness.WriteFile(path, func(w io.Writer) {
		fmt.Fprintln(w, "t_s,rss_bytes,cpu_s,client_cpu_s,machine_busy_s,heap_inuse_bytes,stack_inuse_bytes,goroutines,connections,shakes_total,mallocs_total,alloc_bytes_total,gc_cpu_s,scrape_ms,error")
		for i := range samples {
			s := &samples[i]
			fmt.Fprintf(w, "%.3f,%d,%.2f,%.2f,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.4f,%.1f,%s\n",
				s.At.Sub(start).Seconds(), s.RSS, s.CPU.Seconds(), s.Client.Seconds(), s.Machine.Seconds(),
				s.Metric("go_memstats_heap_inuse_bytes"), s.Metric("go_memstats_stack_inuse_bytes"), s.Metric("go_goroutines"),
				s.Metric("hongbao_connections"), s.Shakes(), s.Metric("go_memstats_mallocs_total"), s.Metric("go_memstats_alloc_bytes_total"),
				s.Metric("go_gc_cpu_seconds_total"), float64(s.Scrape.Microseconds())/1e3, harness.CSVError(s.Err))
		}
	})
}
