package main

import (
	"math"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// analysis is everything a run measured, on one time axis: seconds since
// the load client's start.
type analysis struct {
	cfg         *config
	start       time.Time // the load client's start
	serverStart time.Time // just before the server process started: gctrace's @0s
	phases      []phase
	timeline    []runlog.Second
	report      *loadclient.Report // nil when the client wrote none
	gcs         []runlog.GC
	gcBad       int // gctrace lines that did not parse
	samples     []harness.Sample
	caps        captures
	figs        []phaseFigures
	idle        idleFigures
}

// t returns the time of at on the run's axis.
func (a *analysis) t(at time.Time) float64 { return at.Sub(a.start).Seconds() }

// gcT returns the time of a collection on the run's axis.
func (a *analysis) gcT(g *runlog.GC) float64 { return a.t(a.serverStart.Add(g.At)) }

// phaseFigures is one phase summed up: the client's view from its timeline,
// the server's from the samples and the GC trace.
type phaseFigures struct {
	phase
	Achieved float64 // SHAKEs answered a second, mean
	Got      float64 // envelopes got a second, mean
	Opened   float64 // OPENs answered ok a second, mean
	P50, P99 time.Duration
	P99Worst time.Duration
	Errors   int64

	Shakes       float64 // SHAKEs the server answered in the window
	SrvP50       float64 // ingress → egress latency, s: bucket upper bounds
	SrvP99       float64
	SrvP999      float64
	SrvShakeP99  float64 // the SHAKEs' alone; NaN when the histogram has no type label
	SchedP99     float64 // s: runnable goroutines' wait for a P (runtime/metrics /sched/latencies:seconds)
	SchedP999    float64
	CPUCores     float64
	ClientCores  float64 // the load client's CPU
	MachineCores float64 // every process's, the server's and the client's included
	CPUPerShake  time.Duration
	AllocsPerReq float64 // go_memstats_mallocs_total per SHAKE
	BytesPerReq  float64 // go_memstats_alloc_bytes_total per SHAKE

	GCs       int
	MaxPause  time.Duration
	GCCPU     float64 // GC CPU (gctrace, idle marking excluded) over P × phase
	GCShare   float64 // GC CPU (runtime/metrics, all of it) over the server's CPU
	Pauses    float64 // stop-the-world pauses, runtime/metrics
	PauseMax  float64 // s, bucket upper bound
	RSSMax    int64
	Goroutine float64 // most goroutines seen
}

// idleFigures is the server idle with every user connected: the ramp's last
// seconds, after the logins, before the first SHAKE.
type idleFigures struct {
	Seconds       float64
	CPUCores      float64
	AllocsPerSec  float64 // includes one /metrics scrape a second
	ScrapeMallocs float64
}

// latencyMetric is the server's ingress → egress latency histogram, either
// unlabelled or labelled by request type (type="shake", "open", …).
const latencyMetric = "hongbao_latency_seconds"

// serverLatency returns the server's latency histogram between two scrapes:
// of every answer (the types added up when labelled), and of the SHAKEs
// alone (nil when the histogram has no type label).
func serverLatency(s0, s1 *harness.Sample) (all, shake []runlog.Bucket) {
	all = delta(s0, s1, latencyMetric)
	onlyShake := map[string]string{"type": "shake"}
	if h1 := runlog.HistogramWhere(s1.Metrics, latencyMetric, onlyShake); h1 != nil {
		shake = runlog.Delta(runlog.HistogramWhere(s0.Metrics, latencyMetric, onlyShake), h1)
	}
	return all, shake
}

// delta is histogram name between two scrapes.
func delta(s0, s1 *harness.Sample, name string) []runlog.Bucket {
	return runlog.Delta(runlog.Histogram(s0.Metrics, name), runlog.Histogram(s1.Metrics, name))
}

// window returns the first and last sample within [from, to] on the run's
// axis, and false when there are not two.
func (a *analysis) window(from, to float64) (first, last *harness.Sample, ok bool) {
	for i := range a.samples {
		s := &a.samples[i]
		if s.Err != nil || s.Metrics == nil {
			continue
		}
		if t := a.t(s.At); t >= from && t <= to {
			if first == nil {
				first = s
			}
			last = s
		}
	}
	return first, last, first != nil && last != first
}

func (a *analysis) compute() {
	for _, p := range a.phases {
		nan := math.NaN() // "–" in the report when the phase has no two scrapes
		f := phaseFigures{phase: p, SrvP50: nan, SrvP99: nan, SrvP999: nan, SrvShakeP99: nan, SchedP99: nan, SchedP999: nan}
		rows := runlog.Window(a.timeline, p.From, p.To)
		for _, r := range rows {
			n := float64(len(rows))
			f.Achieved, f.Got, f.Opened = f.Achieved+r.Answered/n, f.Got+r.Got/n, f.Opened+r.Opened/n
			f.P99Worst = max(f.P99Worst, r.P99)
			f.Errors += r.Errors
		}
		f.P50 = time.Duration(runlog.Median(rows, func(s *runlog.Second) float64 { return float64(s.P50) }))
		f.P99 = time.Duration(runlog.Median(rows, func(s *runlog.Second) float64 { return float64(s.P99) }))

		if s0, s1, ok := a.window(p.From, p.To); ok {
			dt := s1.At.Sub(s0.At).Seconds()
			f.Shakes = s1.Shakes() - s0.Shakes()
			lat, shake := serverLatency(s0, s1)
			f.SrvP50, f.SrvP99, f.SrvP999 = runlog.Quantile(lat, 0.5), runlog.Quantile(lat, 0.99), runlog.Quantile(lat, 0.999)
			f.SrvShakeP99 = runlog.Quantile(shake, 0.99)
			sched := delta(s0, s1, "go_sched_latencies_seconds")
			f.SchedP99, f.SchedP999 = runlog.Quantile(sched, 0.99), runlog.Quantile(sched, 0.999)
			cpu := s1.CPU - s0.CPU
			f.CPUCores = cpu.Seconds() / dt
			if s0.Client > 0 && s1.Client > 0 {
				f.ClientCores = (s1.Client - s0.Client).Seconds() / dt
			}
			f.MachineCores = (s1.Machine - s0.Machine).Seconds() / dt
			if f.Shakes > 0 {
				f.CPUPerShake = time.Duration(float64(cpu) / f.Shakes)
				f.AllocsPerReq = (s1.Metric("go_memstats_mallocs_total") - s0.Metric("go_memstats_mallocs_total")) / f.Shakes
				f.BytesPerReq = (s1.Metric("go_memstats_alloc_bytes_total") - s0.Metric("go_memstats_alloc_bytes_total")) / f.Shakes
			}
			if cpu > 0 {
				f.GCShare = (s1.Metric("go_gc_cpu_seconds_total") - s0.Metric("go_gc_cpu_seconds_total")) / cpu.Seconds()
			}
			pauses := delta(s0, s1, "go_gc_pauses_seconds")
			f.Pauses, f.PauseMax = runlog.Total(pauses), runlog.Max(pauses)
		}
		for i := range a.samples {
			s := &a.samples[i]
			if t := a.t(s.At); t < p.From || t > p.To {
				continue
			}
			f.RSSMax = max(f.RSSMax, s.RSS)
			f.Goroutine = max(f.Goroutine, s.Metric("go_goroutines"))
		}
		var gcCPU time.Duration
		procs := 0
		for i := range a.gcs {
			g := &a.gcs[i]
			if t := a.gcT(g); t < p.From || t >= p.To {
				continue
			}
			f.GCs++
			f.MaxPause = max(f.MaxPause, g.Pause())
			gcCPU += g.CPU()
			procs = g.Procs
		}
		if procs > 0 {
			f.GCCPU = gcCPU.Seconds() / ((p.To - p.From) * float64(procs))
		}
		a.figs = append(a.figs, f)
	}
	a.computeIdle()
}

// computeIdle measures the ramp's last seconds: every user connected, no
// SHAKE yet. What the server allocates then is mostly the /metrics scrape,
// which the per-SHAKE figures include as well.
func (a *analysis) computeIdle() {
	if len(a.phases) == 0 {
		return
	}
	ramp := a.phases[0]
	from := max(ramp.From, ramp.To-8)
	s0, s1, ok := a.window(from, ramp.To)
	if !ok || s0.Metric("hongbao_connections") < float64(a.cfg.users) {
		return
	}
	dt := s1.At.Sub(s0.At).Seconds()
	n := 0.0
	for i := range a.samples {
		if s := &a.samples[i]; s.At.After(s0.At) && !s.At.After(s1.At) {
			n++ // scrapes in the window, each of which the next sample counts
		}
	}
	mallocs := s1.Metric("go_memstats_mallocs_total") - s0.Metric("go_memstats_mallocs_total")
	a.idle = idleFigures{Seconds: dt, CPUCores: (s1.CPU - s0.CPU).Seconds() / dt, AllocsPerSec: mallocs / dt}
	if n > 0 {
		a.idle.ScrapeMallocs = mallocs / n
	}
}

// gcTotals sums the GC trace over the whole run.
func (a *analysis) gcTotals() (n int, maxPause time.Duration, forced int) {
	for i := range a.gcs {
		if a.gcs[i].Forced {
			forced++
		}
		maxPause = max(maxPause, a.gcs[i].Pause())
	}
	return len(a.gcs), maxPause, forced
}
