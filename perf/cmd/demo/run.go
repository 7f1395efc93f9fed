package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// run is the demo; a nil error means every check passed.
func run(ctx context.Context, cfg config) error {
	stdout, stderr := os.Stdout, os.Stderr
	r, err := harness.NewRun(cfg.Out, "demo-", "demo", stdout, stderr)
	if err != nil {
		return err
	}
	r.Say("%d users, %d SHAKE/s for %v, ingress %s; files in %s/", cfg.users, cfg.qps, cfg.duration, cfg.ingress, r.Dir)
	defer func() {
		r.WriteCommands()
		fmt.Fprintf(stdout, "\ndemo: files in %s/ (server.log, loadclient.log, report.json, timeline.csv, stats.json, campaigns.json, metrics.txt, commands.txt)\n", r.Dir)
	}()
	srv, err := r.StartServer(ctx, "server.log", harness.ServerConfig{
		Bin: cfg.Server(), Args: append([]string{"-ingress", cfg.ingress}, strings.Fields(cfg.ServerFlags)...),
	})
	if err != nil {
		return err
	}
	defer srv.Kill() // after Stop it only waits
	r.Say("server pid %d serving %s, admin %s", srv.PID, srv.Listen, srv.Admin.URL)

	client, err := r.StartClient(ctx, srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users),
		Flags:  []string{"-qps", strconv.Itoa(cfg.qps), "-duration", cfg.duration.String()},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 15 * time.Second, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return err
	}
	r.Say("%s", client.CommandLine())

	// The campaigns once the users are in, to end CampaignMargin before the load.
	wait := min(cfg.duration/2, 30*time.Second)
	var errs []error
	var camps []harness.Campaign
	n, err := harness.WaitLogins(ctx, srv.Admin.Logins, int64(cfg.users), time.Now().Add(wait), client)
	if err != nil && client.Exited() {
		errs = append(errs, err)
	} else {
		if err != nil {
			r.Say("only %d of %d users logged in after %v; starting the campaigns anyway", n, cfg.users, wait)
		}
		secs := max(1, int(time.Until(client.Start.Add(cfg.duration-harness.CampaignMargin)).Seconds()))
		camps, err = r.StartCampaigns(srv.Admin, cfg.camps, secs, "")
		errs = append(errs, err)
	}
	if err := client.Wait(); err != nil {
		errs = append(errs, fmt.Errorf("loadclient: %w", err))
	}
	fmt.Fprintln(stdout, "\nserver ledger after the run (GET /stats):")
	l, err := srv.Admin.Settle(10*time.Second, len(camps) > 0, nil)
	errs = append(errs, err, l.Write(r.Dir))
	st, e := &l.Stats, &l.Stats.Envelopes
	fmt.Fprintf(stdout, "  logins %d, connections %d\n", st.Logins, st.Connections)
	fmt.Fprintf(stdout, "  shake: %d requests: %d got %d fen, %d empty, %d overloaded; created %d (%d fen), in the pool %d (%d fen)\n",
		st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.Empty, st.Shake.Overload,
		st.Shake.Created, st.Shake.CreatedAmount, st.Shake.Pool, st.Shake.PoolAmount)
	fmt.Fprintf(stdout, "  group envelopes: created %d (%d fen), %d shares opened (%d fen), outstanding %d fen; system envelopes skipped %d, OPEN/SEND overloaded %d\n",
		e.Created, e.CreatedAmount, e.Opened, e.OpenedAmount, e.OutstandingAmount, e.SystemSkipped, e.Overload)
	harness.WriteChecks(stdout, l.Checks, 12)
	bad := harness.FailedChecks(l.Checks)
	if rep, err := client.ReadReport(); err == nil && !harness.Reconciled(rep) {
		bad = append(bad, "the load client's reconciliation (report.json)")
	} else if err == nil {
		fmt.Fprintf(stdout, "  %-62s %27s\n", "the load client's reconciliation with /stats", "ok")
	}
	if len(bad) > 0 {
		errs = append(errs, fmt.Errorf("ledger: %s", strings.Join(bad, "; ")))
	}
	if m, err := srv.Admin.Get("/metrics"); err == nil {
		os.WriteFile(r.Path("metrics.txt"), m, 0o644)
	}
	t0 := time.Now()
	code, err := srv.Stop(30 * time.Second)
	fmt.Fprintf(stdout, "server: SIGTERM, exit status %d after %v\n", code, time.Since(t0).Round(time.Millisecond))
	if err := errors.Join(append(errs, err)...); err != nil {
		return err
	}
	r.Say("PASS")
	return nil
}
