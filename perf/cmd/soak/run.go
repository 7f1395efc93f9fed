package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// outcome is everything the report says.
type outcome struct {
	cfg        *config
	run        *harness.Run
	serverPID  int
	serverArgs []string
	loadStart  time.Time
	samples    []harness.Sample
	trends     []trend
	report     *loadclient.Report
	stats      *harness.Stats
	checks     []harness.LedgerCheck
	serverCode int
	stopped    time.Duration
	interrupt  bool
}

// run is one soak; a nil error means it passed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := harness.NewRun(cfg.Out, "soak-", "soak", stdout, stderr)
	if err != nil {
		return err
	}
	o := &outcome{cfg: &cfg, run: r}
	r.Say("%d users, %d SHAKE/s for %v after a %v ramp, churn %g reconnects/s, campaigns shake %d/s and send %d/s × %d; sampling every %v; files in %s/",
		cfg.users, cfg.qps, cfg.duration, cfg.ramp, cfg.churn, cfg.camps.Shake, cfg.camps.Send, cfg.camps.Recipients, cfg.interval, r.Dir)

	if cfg.retention > 0 {
		o.serverArgs = append(o.serverArgs, "-opened-retention", cfg.retention.String())
	}
	o.serverArgs = append(o.serverArgs, strings.Fields(cfg.ServerFlags)...) // later flags win
	srv, err := r.StartServer(ctx, "server.log", harness.ServerConfig{Bin: cfg.Server(), Args: o.serverArgs, StartTimeout: 15 * time.Second})
	if err != nil {
		return err
	}
	defer srv.Kill() // on every early return; after Stop it only waits
	o.serverPID = srv.PID
	r.Say("server pid %d serving %s, admin %s", srv.PID, srv.Listen, srv.Admin.URL)

	// Bounded: the plan, then the client's grace and reconciliation; on ctx
	// done it gets SIGTERM, ends early and reports.
	client, err := r.StartClient(ctx, srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users), Phases: cfg.plan(), Aligned: true,
		Flags:  []string{"-churn", strconv.FormatFloat(cfg.churn, 'g', -1, 64), "-timeout", cfg.timeout.String()},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	o.loadStart = client.Start.Add(cfg.ramp)

	smp := harness.StartSampler(ctx, srv, harness.Every(cfg.interval), harness.SampleOptions{GC: cfg.gc, FDs: true, Require: required}, o.progress)
	gcCmd := ""
	if cfg.gc {
		gcCmd = fmt.Sprintf("curl -s -o /dev/null '%s/debug/pprof/heap?gc=1'; ", srv.Admin.URL)
	}
	r.Step(fmt.Sprintf("every %v until the load is over: RSS, open descriptors, then (GC and) goroutines and heap", cfg.interval),
		fmt.Sprintf("while sleep %d; do grep VmRSS /proc/%d/status; ls /proc/%d/fd | wc -l; %scurl -s %s/metrics | grep -E '^go_(goroutines|memstats_heap_inuse_bytes|threads) '; done",
			int(cfg.interval.Seconds()), srv.PID, srv.PID, gcCmd, srv.Admin.URL))

	var errs []error
	var camps []harness.Campaign
	n, err := harness.WaitLogins(ctx, srv.Admin.Logins, int64(cfg.users), o.loadStart, client)
	switch {
	case ctx.Err() != nil:
	case client.Exited():
		errs = append(errs, err)
	default:
		if err != nil {
			r.Say("only %d of %d users logged in by the end of the ramp; starting the campaigns anyway", n, cfg.users)
		}
		secs := max(1, int(time.Until(o.loadStart.Add(cfg.duration-harness.CampaignMargin)).Seconds()))
		camps, err = r.StartCampaigns(srv.Admin, cfg.camps, secs, "")
		errs = append(errs, err)
	}
	select {
	case <-client.Done():
	case <-ctx.Done():
		o.interrupt = true
		r.Say("interrupted: the load client ends early and reports")
	}
	if err := client.Wait(); err != nil {
		errs = append(errs, fmt.Errorf("loadclient: %w (see loadclient.log)", err))
	}
	o.samples = smp.Stop()

	// The ledger once the client has gone and the campaigns have ended; cut
	// short, they still deal what the whole run was to get.
	l, err := srv.Admin.Settle(15*time.Second, len(camps) > 0 && !o.interrupt, nil)
	r.Step("the ledger and the campaigns after the run", fmt.Sprintf("curl -s %s/stats >%s; curl -s %s/campaigns >%s", srv.Admin.URL, r.Path("stats.json"), srv.Admin.URL, r.Path("campaigns.json")))
	errs = append(errs, err)
	if l.RawStats != nil {
		errs = append(errs, l.Write(r.Dir))
		o.stats, o.checks = &l.Stats, l.Checks
		if o.interrupt {
			o.checks = harness.LedgerChecks(&l.Stats, nil) // still dealing: only the invariants hold
		}
	}
	t0 := time.Now()
	code, serverErr := srv.Stop(60 * time.Second)
	o.serverCode, o.stopped = code, time.Since(t0)
	r.Step(fmt.Sprintf("stop the server: it drains and exits %d in %v", code, o.stopped.Round(time.Millisecond)), fmt.Sprintf("kill -TERM %d", srv.PID))
	var exit struct{ Ledger *harness.Stats }
	if harness.LogLine(srv.Log, "stopped", &exit) == nil && exit.Ledger != nil && o.stats != nil {
		o.checks = append(o.checks,
			harness.LedgerCheck{Name: "the server's exit ledger: shake.got_amount = /stats", Left: exit.Ledger.Shake.GotAmount, Right: o.stats.Shake.GotAmount},
			harness.LedgerCheck{Name: "the server's exit ledger: envelopes.opened_amount = /stats", Left: exit.Ledger.Envelopes.OpenedAmount, Right: o.stats.Envelopes.OpenedAmount})
	}
	o.report, err = client.ReadReport()
	errs = append(errs, err)
	o.trends = trends(o.samples, o.loadStart, cfg.duration)

	errs = append(errs, writeSamples(r.Path("samples.csv"), o.samples, o.loadStart), r.WriteCommands(),
		os.WriteFile(r.Path("report.md"), []byte(o.doc().Markdown()), 0o644))
	fmt.Fprint(stdout, "\n"+o.results().Markdown())
	r.Say("report: %s (samples.csv, commands.txt, logs and the load client's report.json beside it)", r.Path("report.md"))

	if !harness.Reconciled(o.report) {
		errs = append(errs, errors.New("the load client's reconciliation with /stats failed or did not run"))
	}
	if bad := harness.FailedChecks(o.checks); len(bad) > 0 {
		errs = append(errs, fmt.Errorf("ledger: %s", strings.Join(bad, "; ")))
	}
	if o.interrupt {
		errs = append(errs, errors.New("interrupted before the end"))
	}
	if err := errors.Join(append(errs, serverErr)...); err != nil {
		return err
	}
	r.Say("PASS")
	return nil
}

// progress prints a line per sample.
func (o *outcome) progress(s, prev *harness.Sample) {
	line, names := harness.When(s.At, o.loadStart), columns()
	for i, v := range row(s, prev) {
		if v != "" {
			line += "  " + names[i] + " " + v
		}
	}
	o.run.Say("%s", line)
}
