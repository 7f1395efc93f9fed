package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// Phases of a comparison.
const (
	phaseEfficiency = "efficiency"
	phaseLatency    = "latency"
	phaseStep       = "step"
)

// measurement is one server run under one load: what the table is made of.
// Times per SHAKE are CPU microseconds per answered SHAKE over the window.
type measurement struct {
	Variant string `json:"variant"`
	Phase   string `json:"phase"`
	Target  int    `json:"target_qps"`
	Dir     string `json:"dir"`
	Err     string `json:"error,omitempty"`

	Answered    float64 `json:"answered_per_s"` // SHAKE answers a second in the window
	Overloaded  uint64  `json:"overloaded"`     // SHAKE_RESULT status 2, whole run
	Errors      uint64  `json:"client_errors"`  // what the load client counted: connect, reset, timeout, protocol
	ServerUS    float64 `json:"server_cpu_us_per_shake"`
	ClientUS    float64 `json:"client_cpu_us_per_shake"`
	ServerCores float64 `json:"server_cores"` // server CPU ÷ window
	OtherCores  float64 `json:"other_cores"`  // the machine's busy CPU not ours: noise
	// Threads waiting for a CPU, on average over the window (harness.CPUWait
	// ÷ window; -1: not measured): how short of CPU the machine was.
	ServerWait float64 `json:"server_threads_waiting"`
	ClientWait float64 `json:"client_threads_waiting"`
	Allocs     float64 `json:"allocs_per_shake"`

	P50     float64 `json:"p50_ms"` // SHAKE latency, whole run
	P99     float64 `json:"p99_ms"`
	P999    float64 `json:"p99_9_ms"`
	WorstS  float64 `json:"worst_second_p99_ms"`          // highest per-second p99 in the window
	LowS    float64 `json:"lowest_second_answered"`       // fewest answers in any second of the window ÷ the target rate: a stall
	SrvP99  float64 `json:"server_p99_ms,omitempty"`      // the server's own SHAKE decode → write p99 over the window (none in bare mode)
	WaitP99 float64 `json:"server_wait_p99_ms,omitempty"` // its decode → egress batch start p99
	Reconc  string  `json:"reconciliation"`               // ok, off, or what failed
	IdleCPU float64 `json:"idle_cores,omitempty"`
	IdleRSS int64   `json:"idle_rss_bytes,omitempty"`
	ConnRSS float64 `json:"rss_per_conn_bytes,omitempty"`
}

func (m *measurement) ok() bool { return m.Err == "" }

// run is the whole comparison.
func run(ctx context.Context, cfg config) error {
	r, err := harness.NewRun(cfg.Out, "compare-", "compare", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	dir, say := r.Dir, r.Say
	say("%d users; variants %s; efficiency %d QPS × %v, latency %d QPS × %v × %d round(s), steps %v × %v; files in %s/",
		cfg.users, names(cfg.variants), cfg.qps, cfg.qpsDur, cfg.highQPS, cfg.highDur, cfg.repeat, cfg.steps, cfg.stepDur, dir)
	if cfg.noise > 0 {
		say("noise: %d goroutines each busy %v of every %v, for the whole run", cfg.noise, cfg.noiseBusy, noisePeriod)
		nctx, stop := context.WithCancel(ctx)
		defer stop()
		noise(nctx, cfg.noise, cfg.noiseBusy)
	}
	var all []*measurement
	// measure runs one measurement; phase also names its directory (latency2:
	// the second round of the latency phase).
	measure := func(v variant, phase string, qps int, dur time.Duration, idle bool) *measurement {
		m := &measurement{Variant: v.name, Phase: phase, Target: qps, Dir: filepath.Join(dir, fmt.Sprintf("%s-%s-%d", v.name, phase, qps))}
		if err := measureInto(ctx, &cfg, v, qps, dur, idle, m); err != nil {
			m.Err = err.Error()
		}
		all = append(all, m)
		if m.ok() {
			say("%-11s %-10s %6d QPS: answered %6.0f/s (lowest second %3.0f %%), server %5.1f µs/SHAKE, client %5.1f µs, p99 %6.2f ms, p99.9 %6.2f ms, worst second %6.2f ms, server p99 %5.2f ms (wait %5.2f), waiting for a CPU %s, %s",
				v.name, phase, qps, m.Answered, 100*m.LowS, m.ServerUS, m.ClientUS, m.P99, m.P999, m.WorstS, m.SrvP99, m.WaitP99, cpuWaits(m), m.Reconc)
		} else {
			say("%-11s %-10s %6d QPS: FAILED: %s", v.name, phase, qps, m.Err)
		}
		return m
	}
	for _, v := range cfg.variants {
		measure(v, phaseEfficiency, cfg.qps, cfg.qpsDur, true)
	}
	// The throughput search goes on from the latency phase with the
	// variants that held it, each until a rate it does not hold.
	held := func(m *measurement) bool {
		return m.ok() && m.P99 <= harness.Millis(cfg.maxP99) && m.Answered >= 0.9*float64(m.Target)
	}
	// The latency phase -repeat times, the variants interleaved in each
	// round; a variant's figure is its run with the median p99 (medianLatency).
	lats := map[string][]*measurement{}
	for r := range cfg.repeat {
		for _, v := range cfg.variants {
			name := phaseLatency
			if cfg.repeat > 1 {
				name = fmt.Sprintf("%s%d", phaseLatency, r+1)
			}
			m := measure(v, name, cfg.highQPS, cfg.highDur, false)
			m.Phase = phaseLatency
			lats[v.name] = append(lats[v.name], m)
		}
	}
	var alive []variant
	for _, v := range cfg.variants {
		if m := medianLatency(lats[v.name]); m != nil && held(m) {
			alive = append(alive, v)
		}
	}
	for _, qps := range cfg.steps {
		var next []variant
		for _, v := range alive {
			if ctx.Err() != nil {
				break
			}
			if held(measure(v, phaseStep, qps, cfg.stepDur, false)) {
				next = append(next, v)
			}
		}
		alive = next
	}
	if err := ctx.Err(); err != nil {
		say("stopped early: %v", err)
	}

	t := buildTable(&cfg, all)
	b, _ := json.MarshalIndent(all, "", "  ")
	errs := []error{os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644),
		os.WriteFile(filepath.Join(dir, "report.md"), []byte(t.doc(dir).Markdown()), 0o644)}
	fmt.Println()
	fmt.Print(t.text())
	say("report: %s (results.json and every run's logs beside it)", filepath.Join(dir, "report.md"))
	for _, m := range all {
		if !m.ok() {
			errs = append(errs, fmt.Errorf("%s %s %d: %s", m.Variant, m.Phase, m.Target, m.Err))
		}
	}
	return errors.Join(errs...)
}

// medianLatency returns the measurement with the median p99 among a
// variant's successful latency runs (the lower middle of an even count), or
// nil when none succeeded.
func medianLatency(ms []*measurement) *measurement {
	ok := slices.DeleteFunc(slices.Clone(ms), func(m *measurement) bool { return !m.ok() })
	if len(ok) == 0 {
		return nil
	}
	slices.SortStableFunc(ok, func(a, b *measurement) int { return cmp.Compare(a.P99, b.P99) })
	return ok[(len(ok)-1)/2]
}

// measureInto starts a server of variant v, loads it at qps for dur after
// the ramp and measures it into m.
func measureInto(ctx context.Context, cfg *config, v variant, qps int, dur time.Duration, idle bool, m *measurement) error {
	dir := m.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bare := slices.Contains(v.flags, "-pipeline=none")
	srv, err := harness.Start(ctx, harness.ServerConfig{
		Bin: cfg.Server(), Args: append(slices.Clone(v.flags), strings.Fields(cfg.ServerFlags)...),
		Log: filepath.Join(dir, "server.log"), Echo: os.Stderr, StartTimeout: 15 * time.Second,
	})
	if err != nil {
		return err
	}
	defer srv.Kill()
	if idle && cfg.idle > 0 {
		time.Sleep(500 * time.Millisecond) // past the start's own work
		c0, _ := harness.CPUTime(srv.PID)
		time.Sleep(cfg.idle)
		c1, _ := harness.CPUTime(srv.PID)
		m.IdleCPU = (c1 - c0).Seconds() / cfg.idle.Seconds()
		m.IdleRSS, _ = harness.RSS(srv.PID)
	}
	rss0, _ := harness.RSS(srv.PID)

	flags := []string{"-connect-rate", "20000", "-quiet"}
	if bare {
		flags = append(flags, "-reconcile", "off") // no stages, no ledger to reconcile with
	}
	client, err := harness.StartClient(ctx, srv, harness.ClientConfig{
		Bin: cfg.Client(), Dir: dir, Users: harness.Users(cfg.users), Phases: fmt.Sprintf("0@%v,%d@%v", cfg.ramp, qps, dur),
		Flags: flags, Source: cfg.Source, More: cfg.ClientFlags, Grace: 15 * time.Second, Aligned: true,
	})
	if err != nil {
		return err
	}
	os.WriteFile(filepath.Join(dir, "commands.txt"), []byte(srv.CommandLine()+"\n"+client.CommandLine()+"\n"), 0o644)
	at := func(d time.Duration) bool { // false: the client ended or ctx is done before start+d
		select {
		case <-time.After(time.Until(client.Start.Add(d))):
			return true
		case <-client.Done():
			return false
		case <-ctx.Done():
			return false
		}
	}
	var campErr error
	if !bare && cfg.shakeRate > 0 && at(cfg.ramp-time.Second) {
		secs := int((dur + 2*time.Second) / time.Second)
		_, campErr = srv.Admin.StartCampaign("shake", harness.ShakeCampaign(cfg.shakeRate, secs))
	}
	if at(cfg.ramp - 300*time.Millisecond) {
		if rss, err := harness.RSS(srv.PID); err == nil && idle {
			m.ConnRSS = float64(rss-rss0) / float64(cfg.users)
		}
	}
	// The window: the QPS phase less its first and last second.
	from, to := cfg.ramp+time.Second, cfg.ramp+dur-time.Second
	var s0, s1 sample
	windowed := at(from) && s0.read(srv, client.PID()) == nil && at(to) && s1.read(srv, client.PID()) == nil
	cerr := client.Wait()
	code, serr := srv.Stop(30 * time.Second)
	if campErr != nil {
		return fmt.Errorf("shake campaign: %w", campErr)
	}
	if !windowed {
		return fmt.Errorf("the load client ended before the window was measured (%v); see %s", cerr, client.Log)
	}
	rep, err := client.ReadReport()
	rows, err2 := harness.ReadTimeline(client.Timeline)
	if err := errors.Join(err, err2); err != nil {
		return err
	}
	win := runlog.Window(rows, from.Seconds(), to.Seconds())
	var answers float64
	m.LowS = 1
	for _, r := range win {
		answers += r.Answered
		m.WorstS = max(m.WorstS, harness.Millis(r.P99))
		m.LowS = min(m.LowS, r.Answered/float64(qps))
	}
	secs := (to - from).Seconds()
	m.Answered = answers / secs
	if answers > 0 {
		m.ServerUS = float64(s1.CPU-s0.CPU) / 1e3 / answers
		m.ClientUS = float64(s1.Client-s0.Client) / 1e3 / answers
		m.Allocs = (s1.Metric("go_memstats_mallocs_total") - s0.Metric("go_memstats_mallocs_total")) / answers
	}
	m.SrvP99 = serverP99(s0.Metrics, s1.Metrics, "hongbao_latency_seconds")
	m.WaitP99 = serverP99(s0.Metrics, s1.Metrics, "hongbao_batch_wait_seconds")
	m.ServerCores = (s1.CPU - s0.CPU).Seconds() / secs
	m.ServerWait, m.ClientWait = -1, -1 // not measured, rather than the measurement failed
	if s0.waitOK && s1.waitOK {
		m.ServerWait, m.ClientWait = (s1.wait[0]-s0.wait[0]).Seconds()/secs, (s1.wait[1]-s0.wait[1]).Seconds()/secs
	}
	m.OtherCores = ((s1.Machine - s0.Machine) - (s1.CPU - s0.CPU) - (s1.Client - s0.Client)).Seconds() / secs
	if sh := rep.Requests["SHAKE"]; sh != nil {
		m.P50, m.P99, m.P999 = float64(sh.Latency.P50)/1e6, float64(sh.Latency.P99)/1e6, float64(sh.Latency.P999)/1e6
		m.Overloaded = sh.Status["2"]
	}
	if m.Reconc = "off"; rep.Reconcile != nil && rep.Reconcile.OK {
		m.Reconc = "ok"
	} else if rep.Reconcile != nil {
		m.Reconc = "MISMATCH: " + rep.Reconcile.Summary()
	}
	for kind, n := range rep.Errors {
		if kind != "overload" {
			m.Errors += n
		}
	}
	// A load client that counted errors or a mismatch exits 1: its figures
	// stand, with the errors and the reconciliation in the table.
	var errs []error
	if cerr != nil && m.Errors == 0 && m.Reconc != "" && !strings.HasPrefix(m.Reconc, "MISMATCH") {
		errs = append(errs, fmt.Errorf("load client: %v (see %s)", cerr, client.Log))
	}
	if serr != nil {
		errs = append(errs, fmt.Errorf("server exit %d: %w", code, serr))
	}
	return errors.Join(errs...)
}

// sample is one end of the window: the server's, the client's and the
// machine's CPU, /metrics, and how long the server's and the client's
// threads have waited for a CPU (waitOK: the kernel keeps schedstat).
type sample struct {
	harness.Sample
	wait   [2]time.Duration
	waitOK bool
}

func (s *sample) read(srv *harness.Server, clientPID int) error {
	s.Sample = harness.ReadSample(srv, clientPID, harness.SampleOptions{})
	var e0, e1 error
	s.wait[0], e0 = harness.CPUWait(srv.PID)
	s.wait[1], e1 = harness.CPUWait(clientPID)
	s.waitOK = e0 == nil && e1 == nil
	return s.Err
}

// serverP99 is the p99 in ms of the server's SHAKE histogram name between
// two scrapes (bucket bounds: four to each doubling of µs), 0 when it has none.
func serverP99(m0, m1 map[string]float64, name string) float64 {
	shake := map[string]string{"type": "shake"}
	h := runlog.Delta(runlog.HistogramWhere(m0, name, shake), runlog.HistogramWhere(m1, name, shake))
	if runlog.Total(h) == 0 {
		return 0
	}
	return runlog.Quantile(h, 0.99) * 1e3
}
