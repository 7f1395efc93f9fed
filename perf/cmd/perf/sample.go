package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"hongbao/perf/internal/harness"
)

// sample is the server at one moment: what /proc says and a /metrics
// scrape.
type sample struct {
	At      time.Time
	RSS     int64         // bytes, VmRSS
	CPU     time.Duration // utime + stime, all threads
	Client  time.Duration // the load client's utime + stime; 0 before it starts
	Machine time.Duration // every CPU's busy time (/proc/stat): everyone's work
	Metrics map[string]float64
	Scrape  time.Duration // how long GET /metrics took
	Err     error
}

// metric returns series name of the scrape, 0 when it has none.
func (s *sample) metric(name string) float64 { return s.Metrics[name] }

// shakes is every SHAKE the server answered so far: got, empty, overload.
func (s *sample) shakes() float64 {
	return s.metric(`hongbao_shake_total{result="got"}`) + s.metric(`hongbao_shake_total{result="empty"}`) + s.metric(`hongbao_shake_total{result="overload"}`)
}

// sampler reads the server every second until stopped. samples belongs to
// the loop until it stops, then to Stop.
type sampler struct {
	srv     *harness.Server
	client  atomic.Int64 // the load client's pid, once it runs
	samples []sample
	loop    *harness.Loop
}

// startSampler samples srv now and then on every whole second.
func startSampler(ctx context.Context, srv *harness.Server) *sampler {
	s := &sampler{srv: srv}
	// Half past each second: away from the load client's ticks and rate
	// changes, which fall on whole seconds.
	halfPast := func(now time.Time) time.Time {
		next := now.Truncate(time.Second).Add(500 * time.Millisecond)
		if !next.After(now) {
			next = next.Add(time.Second)
		}
		return next
	}
	s.loop = harness.Repeat(ctx, halfPast, s.take)
	return s
}

func (s *sampler) take() {
	sm := sample{At: time.Now()}
	var err1, err2, err3 error
	sm.RSS, err1 = harness.RSS(s.srv.PID)
	sm.CPU, err2 = harness.CPUTime(s.srv.PID)
	if pid := s.client.Load(); pid > 0 {
		sm.Client, _ = harness.CPUTime(int(pid)) // gone after its run: 0
	}
	sm.Machine, _ = harness.MachineBusy()
	t0 := time.Now()
	sm.Metrics, err3 = s.srv.Admin.Metrics()
	sm.Scrape = time.Since(t0)
	for _, err := range []error{err1, err2, err3} {
		if err != nil && sm.Err == nil {
			sm.Err = err
		}
	}
	s.samples = append(s.samples, sm)
}

// Stop takes a last sample and returns them all, oldest first.
func (s *sampler) Stop() []sample {
	s.loop.Stop()
	s.take()
	return s.samples
}

// writeSamples writes the samples as CSV, times in seconds since start.
func writeSamples(path string, samples []sample, start time.Time) error {
	return harness.WriteFile(path, func(w io.Writer) {
		fmt.Fprintln(w, "t_s,rss_bytes,cpu_s,client_cpu_s,machine_busy_s,heap_inuse_bytes,stack_inuse_bytes,goroutines,connections,shakes_total,mallocs_total,alloc_bytes_total,gc_cpu_s,scrape_ms,error")
		for i := range samples {
			s := &samples[i]
			fmt.Fprintf(w, "%.3f,%d,%.2f,%.2f,%.2f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.4f,%.1f,%s\n",
				s.At.Sub(start).Seconds(), s.RSS, s.CPU.Seconds(), s.Client.Seconds(), s.Machine.Seconds(),
				s.metric("go_memstats_heap_inuse_bytes"), s.metric("go_memstats_stack_inuse_bytes"), s.metric("go_goroutines"),
				s.metric("hongbao_connections"), s.shakes(), s.metric("go_memstats_mallocs_total"), s.metric("go_memstats_alloc_bytes_total"),
				s.metric("go_gc_cpu_seconds_total"), float64(s.Scrape.Microseconds())/1e3, harness.CSVError(s.Err))
		}
	})
}
