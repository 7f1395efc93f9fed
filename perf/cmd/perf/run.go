package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
	"hongbao/perf/internal/runlog"
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
	dir, path, err := harness.RunDir(cfg.Out, "")
	if err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(stdout, "perf: "+format+"\n", args...) }
	say("%d users, phases %s, shake campaign %d/s, send campaign %d/s × %d recipients; files in %s/", cfg.users, cfg.plan(), cfg.shakeRate, cfg.sendRate, cfg.recipients, dir)
	log := &steps{}
	var out outcome

	serverStart := time.Now()
	srv, err := startServer(ctx, &cfg, strings.Fields(cfg.ServerFlags), path("server.log"), stderr)
	if err != nil {
		return err
	}
	defer srv.Kill() // on every early return; after Stop it only waits
	log.add(serverStart, "start the server, its GC trace (GODEBUG=gctrace=1) and log in server.log", "GODEBUG=gctrace=1 "+srv.CommandLine(), 0)
	say("server pid %d serving %s, admin %s", srv.PID, srv.Listen, srv.Admin.URL)
	smp := startSampler(ctx, srv)
	log.add(time.Now(), "every second until the server stops: its RSS, its CPU time (utime+stime, 1/100 s) and its metrics",
		fmt.Sprintf("while sleep 1; do grep VmRSS /proc/%d/status; awk '{print $14+$15}' /proc/%d/stat; curl -s %s/metrics >>%s; done",
			srv.PID, srv.PID, srv.Admin.URL, path("metrics.log")), 0)

	// Bounded: the plan, the client's grace, its reconciliation.
	client, err := harness.StartClient(ctx, srv, harness.ClientConfig{
		Bin: filepath.Join(cfg.Bin, "loadclient"), Dir: dir, Users: cfg.users, Phases: cfg.plan(),
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 15 * time.Second, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return err
	}
	start := client.Start
	log.setStart(start)
	smp.client.Store(int64(client.Cmd.Process.Pid))
	log.add(client.Launched, "run the load client (live line every second in loadclient.log)", client.CommandLine(), 0)

	// The campaigns and the captures, each at its time; cut short if the
	// client ends early.
	stepCtx, cancelSteps := context.WithCancel(ctx)
	defer cancelSteps()
	ph := cfg.phases()
	var wg sync.WaitGroup
	var caps captures
	wg.Add(2)
	go func() {
		defer wg.Done()
		out.campErr = startCampaigns(stepCtx, srv.Admin, &cfg, start, ph, log)
	}()
	go func() {
		defer wg.Done()
		at := start.Add(time.Duration(ph[1].From*float64(time.Second)) + cfg.settle)
		caps, out.captureErr = capture(stepCtx, srv.Admin.URL, &cfg, at, dir, log)
	}()
	out.clientErr = <-client.Done
	cancelSteps()
	wg.Wait()

	// The server after the run, then SIGTERM.
	samples := smp.Stop()
	for _, f := range []struct{ url, file, what string }{
		{"/stats", "stats.json", "the ledger after the run"},
		{"/campaigns", "campaigns.json", "the campaigns after the run"},
		{"/metrics", "metrics.txt", "the metrics after the run"},
	} {
		if err := fetch(ctx, srv.Admin.URL+f.url, path(f.file), 30*time.Second); err != nil {
			say("%v", err)
		}
		log.add(time.Now(), f.what, fmt.Sprintf("curl -sS -o %s %s%s", path(f.file), srv.Admin.URL, f.url), 0)
	}
	t0 := time.Now()
	out.serverCode, out.serverErr = srv.Stop(30 * time.Second)
	out.stopped = time.Since(t0)
	log.add(t0, fmt.Sprintf("stop the server: it drains and exits %d", out.serverCode), fmt.Sprintf("kill -TERM %d", srv.PID), out.stopped)
	say("server: SIGTERM, exit status %d after %v", out.serverCode, out.stopped.Round(time.Millisecond))

	a := &analysis{cfg: &cfg, start: start, serverStart: serverStart, phases: ph, samples: samples, caps: caps}
	var errs []error
	if err := a.load(dir); err != nil {
		errs = append(errs, err)
	}
	if a.report != nil {
		out.startSkew = a.report.Start.Sub(start).Seconds()
		if out.startSkew != 0 {
			say("the load client started %+.3fs from the expected second; the figures use its start", out.startSkew)
			a.start = a.report.Start
		}
	}
	a.compute()
	if err := writeSamples(path("samples.csv"), samples, a.start); err != nil {
		errs = append(errs, err)
	}
	if err := writeCommands(path("commands.txt"), log); err != nil {
		errs = append(errs, err)
	}
	flames, err := renderFlames(a, dir, stderr)
	if err != nil {
		errs = append(errs, err)
	}
	charts, err := renderCharts(a, dir)
	if err != nil {
		errs = append(errs, err)
	}
	rep := buildReport(a, &out, dir, flames, charts, log)
	if err := os.WriteFile(path("report.md"), []byte(rep.markdown()), 0o644); err != nil {
		errs = append(errs, err)
	}
	if err := os.WriteFile(path("report.html"), []byte(rep.html("hongbao perf "+filepath.Base(dir))), 0o644); err != nil {
		errs = append(errs, err)
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, summaryTable(a).markdown())
	if out.clientErr != nil {
		say("the load client reported a failure (%v): see loadclient.log and the report", out.clientErr)
	}
	say("report: %s (and report.md); flame graphs, charts, profiles and commands.txt beside it", path("report.html"))
	return errors.Join(append(errs, out.captureErr, out.campErr, out.serverErr)...)
}

// startServer starts the server with GODEBUG=gctrace=1 added to its
// environment. harness.Start passes on this process's environment, so the
// variable is set here for the moment of the start only; the load client
// and the rest of this process do not trace.
func startServer(ctx context.Context, cfg *config, args []string, log string, stderr io.Writer) (*harness.Server, error) {
	old, had := os.LookupEnv("GODEBUG")
	godebug := "gctrace=1"
	if old != "" {
		godebug = old + ",gctrace=1"
	}
	os.Setenv("GODEBUG", godebug)
	defer func() {
		if had {
			os.Setenv("GODEBUG", old)
		} else {
			os.Unsetenv("GODEBUG")
		}
	}()
	return harness.Start(ctx, harness.ServerConfig{
		Bin: filepath.Join(cfg.Bin, "server"), Args: args, Log: log,
		Echo: dropGCTrace{stderr}, StartTimeout: 15 * time.Second,
	})
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
func startCampaigns(ctx context.Context, a *harness.Admin, cfg *config, start time.Time, ph []phase, log *steps) error {
	steady, send, end := ph[1].From, ph[2].From, ph[len(ph)-1].To
	shakeSecs, sendSecs := int(end-steady), int(ph[2].To-send)
	for _, c := range []struct {
		at   float64
		kind string
		q    url.Values
		what string
	}{
		{steady, "shake", harness.ShakeCampaign(cfg.shakeRate, shakeSecs),
			fmt.Sprintf("shake campaign: %d envelopes a second for %d s, 1..200 fen", cfg.shakeRate, shakeSecs)},
		{send, "send", harness.SendCampaign(cfg.sendRate, sendSecs, cfg.recipients),
			fmt.Sprintf("send campaign: %d system group envelopes a second for %d s, %d recipients each", cfg.sendRate, sendSecs, cfg.recipients)},
	} {
		select {
		case <-ctx.Done():
			return nil // the client ended early: its error says why
		case <-time.After(time.Until(start.Add(time.Duration(c.at * float64(time.Second))))):
		}
		t0 := time.Now()
		_, err := a.StartCampaign(c.kind, c.q)
		log.add(t0, c.what, fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, c.kind, c.q.Encode()), 0)
		if err != nil {
			return err
		}
	}
	return nil
}

// load reads the files the run left: the client's timeline and report, the
// server's GC trace.
func (a *analysis) load(dir string) error {
	var errs []error
	if f, err := os.Open(filepath.Join(dir, "timeline.csv")); err != nil {
		errs = append(errs, err)
	} else {
		a.timeline, err = runlog.ParseTimeline(f)
		f.Close()
		errs = append(errs, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "report.json")); err != nil {
		errs = append(errs, err)
	} else {
		var r loadclient.Report
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("report.json: %w", err))
		} else {
			a.report = &r
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "server.log")); err != nil {
		errs = append(errs, err)
	} else {
		a.gcs, a.gcBad, err = runlog.ParseGCTrace(bytes.NewReader(b))
		errs = append(errs, err)
		// gctrace.txt: grep '^gc ' server.log
		var gc bytes.Buffer
		for line := range bytes.Lines(b) {
			if bytes.HasPrefix(line, []byte("gc ")) {
				gc.Write(line)
			}
		}
		errs = append(errs, os.WriteFile(filepath.Join(dir, "gctrace.txt"), gc.Bytes(), 0o644))
	}
	return errors.Join(errs...)
}
