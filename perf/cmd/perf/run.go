package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// outcome is how the run's processes ended, for the report.
type outcome struct {
	clientErr  error // the load client's exit: non-nil on any error it counted or a reconciliation mismatch
	serverCode int   // the server's exit status after SIGTERM
	serverErr  error
	captureErr error
	campErr    error
	startSkew  float64 // the client's reported start minus the expected one, s
	stopped    time.Duration
}

// run is one perf run; the error says what kept it from measuring.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.Out, "", "perf", stdout, stderr)
	if err != nil {
		return err
	}
	dir, path := r.Dir, r.Path
	r.Say("%d users, phases %s, shake campaign %d/s, send campaign %d/s × %d recipients; files in %s/", cfg.users, cfg.plan(), cfg.camps.Shake, cfg.camps.Send, cfg.camps.Recipients, dir)
	log := &r.Steps
	var out outcome

	// The server's GC trace goes to its log; its echo leaves those lines out.
	serverStart := time.Now()
	srv, err := r.StartServer(ctx, "server.log", harness.ServerConfig{
		Bin: cfg.Server(), Args: strings.Fields(cfg.ServerFlags), Env: []string{"GODEBUG=" + strings.TrimPrefix(os.Getenv("GODEBUG")+",gctrace=1", ",")},
		Echo: dropGCTrace{stderr}, StartTimeout: 15 * time.Second,
	})
	if err != nil {
		return err
	}
	defer srv.Kill() // on every early return; after Stop it only waits
	r.Say("server pid %d serving %s, admin %s", srv.PID, srv.Listen, srv.Admin.URL)
	smp := harness.StartSampler(ctx, srv, harness.SecondsAt(500*time.Millisecond), harness.SampleOptions{}, nil)
	r.Step("every second until the server stops: its RSS, its CPU time (utime+stime, 1/100 s) and its metrics",
		fmt.Sprintf("while sleep 1; do grep VmRSS /proc/%d/status; awk '{print $14+$15}' /proc/%d/stat; curl -s %s/metrics >>%s; done",
			srv.PID, srv.PID, srv.Admin.URL, path("metrics.log")))

	// Bounded: the plan, the client's grace, its reconciliation.
	client, err := r.StartClient(ctx, srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users), Phases: cfg.plan(), Aligned: true,
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 15 * time.Second, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return err
	}
	start := client.Start
	log.SetStart(start)
	smp.SetClient(client.PID())

	// The campaigns and the captures, each at its time; cut short if the
	// client ends early.
	stepCtx, cancelSteps := context.WithCancel(ctx)
	defer cancelSteps()
	ph := cfg.phases()
	var wg sync.WaitGroup
	var caps captures
	wg.Go(func() { out.campErr = startCampaigns(stepCtx, srv.Admin, &cfg, start, ph, log) })
	wg.Go(func() {
		at := start.Add(time.Duration(ph[1].From*float64(time.Second)) + cfg.settle)
		caps, out.captureErr = capture(stepCtx, srv.Admin, &cfg, at, dir, log)
	})
	out.clientErr = client.Wait()
	cancelSteps()
	wg.Wait()

	// The server after the run, then SIGTERM.
	samples := smp.Stop()
	for _, f := range []struct{ url, file, what string }{
		{"/stats", "stats.json", "the ledger after the run"},
		{"/campaigns", "campaigns.json", "the campaigns after the run"},
		{"/metrics", "metrics.txt", "the metrics after the run"},
	} {
		if err := srv.Admin.Fetch(ctx, f.url, path(f.file), 30*time.Second); err != nil {
			r.Say("%v", err)
		}
		r.Step(f.what, fmt.Sprintf("curl -sS -o %s %s%s", path(f.file), srv.Admin.URL, f.url))
	}
	t0 := time.Now()
	out.serverCode, out.serverErr = srv.Stop(30 * time.Second)
	out.stopped = time.Since(t0)
	log.Add(t0, fmt.Sprintf("stop the server: it drains and exits %d", out.serverCode), fmt.Sprintf("kill -TERM %d", srv.PID), out.stopped)
	r.Say("server: SIGTERM, exit status %d after %v", out.serverCode, out.stopped.Round(time.Millisecond))

	a := &analysis{cfg: &cfg, start: start, serverStart: serverStart, phases: ph, samples: samples, caps: caps}
	errs := []error{a.load(client)}
	if a.report != nil {
		out.startSkew = a.report.Start.Sub(start).Seconds()
		if out.startSkew != 0 {
			r.Say("the load client started %+.3fs from the expected second; the figures use its start", out.startSkew)
			a.start = a.report.Start
		}
	}
	a.compute()
	errs = append(errs, writeSamples(path("samples.csv"), samples, a.start), r.WriteCommands())
	flames, err := renderFlames(a, dir, stderr)
	errs = append(errs, err)
	charts, err := renderCharts(a, dir)
	errs = append(errs, err)
	rep := buildReport(a, &out, dir, flames, charts, log)
	errs = append(errs, os.WriteFile(path("report.md"), []byte(rep.Markdown()), 0o644),
		os.WriteFile(path("report.html"), []byte(rep.HTML("hongbao perf "+filepath.Base(dir))), 0o644))
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, summaryTable(a).Markdown())
	if out.clientErr != nil {
		r.Say("the load client reported a failure (%v): see loadclient.log and the report", out.clientErr)
	}
	r.Say("report: %s (and report.md); flame graphs, charts, profiles and commands.txt beside it", path("report.html"))
	return errors.Join(append(errs, out.captureErr, out.campErr, out.serverErr)...)
}

// dropGCTrace passes on the server's echoed warnings but not its gctrace
// lines, which go to server.log only.
type dropGCTrace struct{ w io.Writer }

func (d dropGCTrace) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "server: gc ") {
		return len(p), nil
	}
	return d.w.Write(p)
}

// startCampaigns starts the shake campaign when the steady phase starts (to
// run until the end) and the send campaign when the send phase starts (for
// that phase).
func startCampaigns(ctx context.Context, a *harness.Admin, cfg *config, start time.Time, ph []phase, log *harness.Steps) error {
	steady, send, end := ph[1].From, ph[2].From, ph[len(ph)-1].To
	shakeSecs, sendSecs := int(end-steady), int(ph[2].To-send)
	for _, c := range []struct {
		at   float64
		kind string
		q    url.Values
		what string
	}{
		{steady, "shake", harness.ShakeCampaign(cfg.camps.Shake, shakeSecs),
			fmt.Sprintf("shake campaign: %d envelopes a second for %d s, 1..200 fen", cfg.camps.Shake, shakeSecs)},
		{send, "send", harness.SendCampaign(cfg.camps.Send, sendSecs, cfg.camps.Recipients),
			fmt.Sprintf("send campaign: %d system group envelopes a second for %d s, %d recipients each", cfg.camps.Send, sendSecs, cfg.camps.Recipients)},
	} {
		select {
		case <-ctx.Done():
			return nil // the client ended early: its error says why
		case <-time.After(time.Until(start.Add(time.Duration(c.at * float64(time.Second))))):
		}
		t0 := time.Now()
		_, err := a.StartCampaign(c.kind, c.q)
		log.Add(t0, c.what, fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, c.kind, c.q.Encode()), 0)
		if err != nil {
			return err
		}
	}
	return nil
}

// load reads the files the run left: the client's timeline and report, the
// server's GC trace, which it also writes to gctrace.txt.
func (a *analysis) load(client *harness.Client) error {
	var errs [3]error
	a.timeline, errs[0] = harness.ReadTimeline(client.Timeline)
	a.report, errs[1] = client.ReadReport()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(client.Report), "server.log"))
	if err != nil {
		return errors.Join(append(errs[:2], err)...)
	}
	a.gcs, a.gcBad, errs[2] = runlog.ParseGCTrace(bytes.NewReader(b))
	var gc bytes.Buffer
	for line := range bytes.Lines(b) {
		if bytes.HasPrefix(line, []byte("gc ")) {
			gc.Write(line)
		}
	}
	return errors.Join(append(errs[:], os.WriteFile(filepath.Join(filepath.Dir(client.Report), "gctrace.txt"), gc.Bytes(), 0o644))...)
}

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
