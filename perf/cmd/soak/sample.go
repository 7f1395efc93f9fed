package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"hongbao/perf/internal/harness"
)

// sample is the server at one moment.
type sample struct {
	At         time.Time
	RSS        int64 // bytes, VmRSS
	FDs        int64 // entries of /proc/PID/fd
	Goroutines int64
	HeapInuse  int64 // bytes; live heap when the sampler forces a collection first
	HeapAlloc  int64
	StackInuse int64
	Threads    int64
	Conns      int64
	CPU        time.Duration // utime + stime
	Shakes     int64         // SHAKEs answered so far: got, empty, overload
	GCs        int64         // collections so far, forced ones included
	Scrape     time.Duration // the GC and GET /metrics
	Err        error
	MetricsOK  bool // the figures from /metrics were read (else they are 0)
}

// rates returns the SHAKEs a second and the server's CPU share (in %) from
// prev to s; ok is false unless both read /metrics.
func rates(prev, s *sample) (shakes, cpu float64, ok bool) {
	if prev == nil || !prev.MetricsOK || !s.MetricsOK {
		return 0, 0, false
	}
	dt := s.At.Sub(prev.At).Seconds()
	return float64(s.Shakes-prev.Shakes) / dt, (s.CPU - prev.CPU).Seconds() / dt * 100, true
}

// metric is one figure the report follows: its name, unit and value.
type metric struct {
	name, unit string
	scale      float64 // the value is divided by it for the report
	value      func(*sample) int64
}

// followed are the figures whose slopes the report gives.
var followed = []metric{
	{"RSS", "MiB", 1 << 20, func(s *sample) int64 { return s.RSS }},
	{"Go heap in use", "MiB", 1 << 20, func(s *sample) int64 { return s.HeapInuse }},
	{"goroutines", "", 1, func(s *sample) int64 { return s.Goroutines }},
	{"open descriptors", "", 1, func(s *sample) int64 { return s.FDs }},
	{"connections", "", 1, func(s *sample) int64 { return s.Conns }},
	{"goroutine stacks", "MiB", 1 << 20, func(s *sample) int64 { return s.StackInuse }},
	{"OS threads", "", 1, func(s *sample) int64 { return s.Threads }},
}

// sampler reads the server every interval from its start until stopped.
// samples belongs to the loop until it stops.
type sampler struct {
	srv      *harness.Server
	gc       bool
	samples  []sample
	progress func(*sample, *sample) // called after each sample with it and the one before (nil at first)
	loop     *harness.Loop
}

func startSampler(ctx context.Context, srv *harness.Server, interval time.Duration, gc bool, progress func(*sample, *sample)) *sampler {
	s := &sampler{srv: srv, gc: gc, progress: progress}
	// The next tick of the grid: after a stall the missed ones are
	// skipped, not taken in a burst.
	t0 := time.Now()
	grid := func(now time.Time) time.Time { return t0.Add((now.Sub(t0)/interval + 1) * interval) }
	s.loop = harness.Repeat(ctx, grid, s.take)
	return s
}

func (s *sampler) take() {
	sm := sample{At: time.Now()}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	sm.RSS, err = harness.RSS(s.srv.PID)
	note(err)
	sm.FDs, err = countFDs(s.srv.PID)
	note(err)
	sm.CPU, err = harness.CPUTime(s.srv.PID)
	note(err)
	t0 := time.Now()
	if s.gc {
		note(s.srv.Admin.GC())
	}
	m, err := s.srv.Admin.Metrics()
	sm.Scrape = time.Since(t0)
	note(err)
	if err == nil {
		sm.MetricsOK = true
		for name, p := range map[string]*int64{
			"go_goroutines": &sm.Goroutines, "go_memstats_heap_inuse_bytes": &sm.HeapInuse,
			"go_memstats_heap_alloc_bytes": &sm.HeapAlloc, "go_memstats_stack_inuse_bytes": &sm.StackInuse,
			"go_threads": &sm.Threads, "hongbao_connections": &sm.Conns, "go_gc_duration_seconds_count": &sm.GCs,
		} {
			v, ok := m[name]
			if !ok {
				note(fmt.Errorf("the server's /metrics has no %s", name))
			}
			*p = int64(v)
		}
		sm.Shakes = int64(m[`hongbao_shake_total{result="got"}`] + m[`hongbao_shake_total{result="empty"}`] + m[`hongbao_shake_total{result="overload"}`])
	}
	sm.Err = errors.Join(errs...)
	s.samples = append(s.samples, sm)
	if s.progress != nil {
		var prev *sample
		if n := len(s.samples); n > 1 {
			prev = &s.samples[n-2]
		}
		s.progress(&s.samples[len(s.samples)-1], prev)
	}
}

// Stop takes a last sample and returns them all, oldest first.
func (s *sampler) Stop() []sample {
	s.loop.Stop()
	s.take()
	return s.samples
}

// countFDs counts the open descriptors of process pid.
func countFDs(pid int) (int64, error) {
	d, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	var n int64
	for {
		names, err := d.Readdirnames(4096)
		n += int64(len(names))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// writeSamples writes the samples as CSV, times in seconds since the load's
// start (negative during the ramp).
func writeSamples(path string, samples []sample, loadStart time.Time) error {
	return harness.WriteFile(path, func(w io.Writer) {
		fmt.Fprintln(w, "t_s,rss_bytes,heap_inuse_bytes,heap_alloc_bytes,stack_inuse_bytes,goroutines,open_fds,threads,connections,cpu_s,shakes_total,gcs_total,scrape_ms,error")
		for i := range samples {
			s := &samples[i]
			fmt.Fprintf(w, "%.3f,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%d,%d,%.1f,%s\n", s.At.Sub(loadStart).Seconds(),
				s.RSS, s.HeapInuse, s.HeapAlloc, s.StackInuse, s.Goroutines, s.FDs, s.Threads, s.Conns,
				s.CPU.Seconds(), s.Shakes, s.GCs, float64(s.Scrape.Microseconds())/1e3, harness.CSVError(s.Err))
		}
	})
}
