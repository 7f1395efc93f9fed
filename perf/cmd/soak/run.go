package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// campaignMargin is how long before the end of the load the campaigns are
// sized to finish, so that the client sees every system envelope while it
// still sends and its drain is quiet.
const campaignMargin = 3 * time.Second

// step is one thing the run did, as a command to do it by hand.
type step struct {
	At   time.Time
	What string
	Cmd  string
}

// outcome is everything the report says.
type outcome struct {
	cfg        *config
	dir        string
	serverPID  int
	serverArgs []string
	loadStart  time.Time
	samples    []sample
	trends     []trend
	report     *loadclient.Report
	stats      *harness.Stats
	exitLedger *harness.Stats // the "stopped" line of server.log
	checks     []harness.LedgerCheck
	clientErr  error
	campErr    error
	serverCode int
	serverErr  error
	stopped    time.Duration
	steps      []step
	interrupt  bool
}

// run is one soak; a nil error means it passed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	dir, path, err := harness.RunDir(cfg.Out, "soak-")
	if err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(stdout, "soak: "+format+"\n", args...) }
	o := &outcome{cfg: &cfg, dir: dir}
	add := func(what, cmd string) { o.steps = append(o.steps, step{time.Now(), what, cmd}) }
	say("%d users, %d SHAKE/s for %v after a %v ramp, churn %g reconnects/s, campaigns shake %d/s and send %d/s × %d; sampling every %v; files in %s/",
		cfg.users, cfg.qps, cfg.duration, cfg.ramp, cfg.churn, cfg.shakeRate, cfg.sendRate, cfg.recipients, cfg.interval, dir)

	var serverArgs []string
	if cfg.retention > 0 {
		serverArgs = append(serverArgs, "-opened-retention", cfg.retention.String())
	}
	serverArgs = append(serverArgs, strings.Fields(cfg.ServerFlags)...) // later flags win
	srv, err := harness.Start(ctx, harness.ServerConfig{
		Bin: filepath.Join(cfg.Bin, "server"), Args: serverArgs, Log: path("server.log"), Echo: stderr, StartTimeout: 15 * time.Second,
	})
	if err != nil {
		return err
	}
	defer srv.Kill() // on every early return; after Stop it only waits
	o.serverPID, o.serverArgs = srv.PID, serverArgs
	add("start the server, log in server.log", srv.CommandLine())
	say("server pid %d serving %s, admin %s", srv.PID, srv.Listen, srv.Admin.URL)

	// Bounded: the plan, then the client's grace and reconciliation; on ctx
	// done it gets SIGTERM, ends early and reports.
	client, err := harness.StartClient(ctx, srv, harness.ClientConfig{
		Bin: filepath.Join(cfg.Bin, "loadclient"), Dir: dir, Users: cfg.users, Phases: cfg.plan(),
		Flags:  []string{"-churn", strconv.FormatFloat(cfg.churn, 'g', -1, 64), "-timeout", cfg.timeout.String()},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	runStart := client.Start
	o.loadStart = runStart.Add(cfg.ramp)
	add("run the load client (a live line every second in loadclient.log)", client.CommandLine())
	clientDone := client.Done

	progress := func(s, prev *sample) {
		line := fmt.Sprintf("%8s  rss %6.1f MiB  heap %5.1f MiB  goroutines %4d  fds %6d  conns %6d", since(s.At, o.loadStart),
			float64(s.RSS)/(1<<20), float64(s.HeapInuse)/(1<<20), s.Goroutines, s.FDs, s.Conns)
		if shakes, cpu, ok := rates(prev, s); ok {
			line += fmt.Sprintf("  SHAKE/s %6.0f  server CPU %3.0f %%", shakes, cpu)
		}
		if s.Err != nil {
			line += "  error: " + s.Err.Error()
		}
		say("%s", line)
	}
	smp := startSampler(ctx, srv, cfg.interval, cfg.gc, progress)
	gcCmd := ""
	if cfg.gc {
		gcCmd = fmt.Sprintf("curl -s -o /dev/null '%s/debug/pprof/heap?gc=1'; ", srv.Admin.URL)
	}
	add(fmt.Sprintf("every %v until the load is over: RSS, open descriptors, then (GC and) goroutines and heap", cfg.interval),
		fmt.Sprintf("while sleep %d; do grep VmRSS /proc/%d/status; ls /proc/%d/fd | wc -l; %scurl -s %s/metrics | grep -E '^go_(goroutines|memstats_heap_inuse_bytes|threads) '; done",
			int(cfg.interval.Seconds()), srv.PID, srv.PID, gcCmd, srv.Admin.URL))

	campDone := make(chan struct{})
	var camps []harness.Campaign
	go func() {
		defer close(campDone)
		camps, o.campErr = startCampaigns(ctx, srv.Admin, &cfg, runStart, clientDone, add, say)
	}()
	select {
	case o.clientErr = <-clientDone:
	case <-ctx.Done():
		o.interrupt = true
		say("interrupted: the load client ends early and reports")
		o.clientErr = <-clientDone
	}
	<-campDone
	o.samples = smp.Stop()

	// The ledger once the client has gone and the campaigns have ended.
	var errs []error
	if _, err := srv.Admin.WaitConnections(0, false, 15*time.Second); err != nil {
		errs = append(errs, fmt.Errorf("after the client left: %w", err))
	}
	if len(camps) > 0 && !o.interrupt { // cut short, they still deal what the whole run was to get
		errs = append(errs, srv.Admin.WaitCampaigns(15*time.Second))
	}
	l, err := srv.Admin.SettledLedger(time.Second)
	add("the ledger and the campaigns after the run", fmt.Sprintf("curl -s %s/stats >%s; curl -s %s/campaigns >%s", srv.Admin.URL, path("stats.json"), srv.Admin.URL, path("campaigns.json")))
	if err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, os.WriteFile(path("stats.json"), l.RawStats, 0o644), os.WriteFile(path("campaigns.json"), l.RawCamps, 0o644))
		o.stats = &l.Stats
		o.checks = l.Checks
		if o.interrupt {
			o.checks = harness.LedgerChecks(&l.Stats, nil) // still dealing: only the invariants hold
		}
	}
	t0 := time.Now()
	o.serverCode, o.serverErr = srv.Stop(60 * time.Second)
	o.stopped = time.Since(t0)
	add(fmt.Sprintf("stop the server: it drains and exits %d in %v", o.serverCode, o.stopped.Round(time.Millisecond)), fmt.Sprintf("kill -TERM %d", srv.PID))
	if l, err := exitLedger(path("server.log")); err == nil {
		o.exitLedger = &l
		if o.stats != nil {
			o.checks = append(o.checks,
				harness.LedgerCheck{Name: "the server's exit ledger: shake.got_amount = /stats", Left: l.Shake.GotAmount, Right: o.stats.Shake.GotAmount},
				harness.LedgerCheck{Name: "the server's exit ledger: envelopes.opened_amount = /stats", Left: l.Envelopes.OpenedAmount, Right: o.stats.Envelopes.OpenedAmount})
		}
	}

	if b, err := os.ReadFile(path("report.json")); err != nil {
		errs = append(errs, fmt.Errorf("the load client wrote no report: %w", err))
	} else {
		var r loadclient.Report
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("report.json: %w", err))
		} else {
			o.report = &r
		}
	}
	o.trends = trends(o.samples, o.loadStart, cfg.duration)

	errs = append(errs, writeSamples(path("samples.csv"), o.samples, o.loadStart), writeCommands(path("commands.txt"), o.steps))
	md := o.markdown()
	errs = append(errs, os.WriteFile(path("report.md"), []byte(md), 0o644))
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, o.summary())
	say("report: %s (samples.csv, commands.txt, logs and the load client's report.json beside it)", path("report.md"))

	if o.clientErr != nil {
		errs = append(errs, fmt.Errorf("loadclient: %w (see loadclient.log)", o.clientErr))
	}
	if o.report == nil || o.report.Reconcile == nil || !o.report.Reconcile.OK {
		errs = append(errs, errors.New("the load client's reconciliation with /stats failed or did not run"))
	}
	if bad := harness.FailedChecks(o.checks); len(bad) > 0 {
		errs = append(errs, fmt.Errorf("ledger: %s", strings.Join(bad, "; ")))
	}
	if o.interrupt {
		errs = append(errs, errors.New("interrupted before the end"))
	}
	errs = append(errs, o.campErr, o.serverErr)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	say("PASS")
	return nil
}

// since formats t relative to the load's start: -0:15 in the ramp.
func since(t, loadStart time.Time) string {
	d := t.Sub(loadStart).Round(time.Second)
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d:%02d", sign, int(d.Minutes()), int(d.Seconds())%60)
}

// startCampaigns waits for the users to log in, then starts the shake and
// the send campaign, each sized to end campaignMargin before the load does.
func startCampaigns(ctx context.Context, a *harness.Admin, cfg *config, runStart time.Time, clientDone chan error,
	add func(what, cmd string), say func(string, ...any)) ([]harness.Campaign, error) {
	deadline := runStart.Add(cfg.ramp)
	for {
		st, _, err := a.Stats()
		if err == nil && st.Logins >= int64(cfg.users) {
			break
		}
		if time.Now().After(deadline) {
			say("only %d of %d users logged in by the end of the ramp; starting the campaigns anyway", st.Logins, cfg.users)
			break
		}
		select {
		case e := <-clientDone:
			clientDone <- e // for run, which waits for it next
			return nil, errors.New("the load client ended before its users logged in")
		case <-ctx.Done():
			return nil, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	end := runStart.Add(cfg.ramp + cfg.duration - campaignMargin)
	secs := max(1, int(time.Until(end).Seconds()))
	return a.StartCampaigns(cfg.shakeRate, cfg.sendRate, cfg.recipients, secs, func(kind string, q url.Values, c harness.Campaign, err error) {
		add(fmt.Sprintf("%s campaign for %d s", kind, secs), fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, kind, q.Encode()))
		if err == nil {
			say("POST /campaigns/%s?%s → campaign %d (%d s)", kind, q.Encode(), c.ID, secs)
		}
	})
}

// exitLedger reads the ledger of the server's "stopped" log line.
func exitLedger(path string) (harness.Stats, error) {
	var st harness.Stats
	f, err := os.Open(path)
	if err != nil {
		return st, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"msg":"stopped"`)) {
			continue
		}
		var line struct {
			Ledger *harness.Stats `json:"ledger"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Ledger != nil {
			st, found = *line.Ledger, true
		}
	}
	if !found {
		return st, errors.New("server.log has no \"stopped\" line with the ledger")
	}
	return st, sc.Err()
}

// writeCommands writes the steps as commands to repeat them by hand.
func writeCommands(path string, steps []step) error {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "# %s: %s\n%s\n\n", s.At.Format("15:04:05.000"), s.What, s.Cmd)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
