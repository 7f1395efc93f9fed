package main

import (
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

	"hongbao/perf/internal/harness"
)

// campaignMargin is how long before the end of the load the campaigns are
// sized to finish: the client then sees every system envelope while it is
// still sending, and its drain at the end is quiet.
const campaignMargin = 3 * time.Second

// run is the demo; a nil error means every check passed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	dir, path, err := harness.RunDir(cfg.out, "demo-")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "demo: %d users, %d SHAKE/s for %v, ingress %s; files in %s/\n", cfg.users, cfg.qps, cfg.duration, cfg.ingress, dir)
	defer func() {
		fmt.Fprintf(stdout, "\ndemo: files in %s/ (server.log, loadclient.log, report.json, timeline.csv, stats.json, campaigns.json, metrics.txt)\n", dir)
	}()

	srv, err := harness.Start(ctx, harness.ServerConfig{
		Bin:  filepath.Join(cfg.bin, "server"),
		Args: append([]string{"-ingress", cfg.ingress}, strings.Fields(cfg.server)...),
		Log:  path("server.log"), Echo: stderr,
	})
	if err != nil {
		return err
	}
	defer srv.Kill() // on every early return; after Stop it only waits
	fmt.Fprintf(stdout, "demo: server pid %d serving %s, admin %s\n", srv.PID, srv.Listen, srv.Admin.URL)

	// The load client, in the background; its output goes to ours and to
	// loadclient.log.
	args := []string{"-server", srv.Listen, "-users", fmt.Sprintf("1-%d", cfg.users),
		"-qps", strconv.Itoa(cfg.qps), "-duration", cfg.duration.String(), "-admin", srv.Admin.URL,
		"-report", path("report.json"), "-timeline", path("timeline.csv")}
	if cfg.source != "" {
		args = append(args, "-source", cfg.source)
	}
	clog, err := os.Create(path("loadclient.log"))
	if err != nil {
		return err
	}
	defer clog.Close()
	client := harness.Command(ctx, 15*time.Second, filepath.Join(cfg.bin, "loadclient"), args...)
	client.Stdout = io.MultiWriter(stdout, clog)
	client.Stderr = io.MultiWriter(stderr, clog)
	fmt.Fprintf(stdout, "demo: %s %s\n", client.Path, strings.Join(args, " "))
	launched := time.Now()
	if err := client.Start(); err != nil {
		return err
	}
	clientDone := make(chan error, 1)
	go func() { clientDone <- client.Wait() }()
	// The client starts its run on the next whole second (loadclient's
	// startOf) and sends for -duration from there.
	end := launched.Truncate(time.Second).Add(time.Second + cfg.duration)

	camps, cerr := startCampaigns(srv.Admin, cfg, end, clientDone, stdout)
	var clientErr error
	select {
	case clientErr = <-clientDone:
	case <-ctx.Done():
		clientErr = <-clientDone // Command's cancel stops it within its grace
	}
	var errs []error
	if cerr != nil {
		errs = append(errs, cerr)
	}
	if clientErr != nil {
		errs = append(errs, fmt.Errorf("loadclient: %w", clientErr))
	}

	// The ledger, once the client has gone and the campaigns have ended.
	if _, err := srv.Admin.WaitConnections(0, false, 10*time.Second); err != nil {
		errs = append(errs, fmt.Errorf("after the client left: %w", err))
	}
	if len(camps) > 0 {
		errs = append(errs, srv.Admin.WaitCampaigns(10*time.Second))
	}
	fmt.Fprintln(stdout, "\nserver ledger after the run (GET /stats):")
	errs = append(errs, checkLedger(srv.Admin, camps, stdout, path))
	if m, err := srv.Admin.Get("/metrics"); err == nil {
		os.WriteFile(path("metrics.txt"), m, 0o644)
	}

	t0 := time.Now()
	code, err := srv.Stop(30 * time.Second)
	fmt.Fprintf(stdout, "server: SIGTERM, exit status %d after %v\n", code, time.Since(t0).Round(time.Millisecond))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "demo: PASS")
	return nil
}

// startCampaigns waits for the users to log in, then starts the shake and
// the send campaign, each sized to end campaignMargin before end. It returns
// the campaigns it started.
func startCampaigns(a *harness.Admin, cfg config, end time.Time, clientDone chan error, stdout io.Writer) ([]harness.Campaign, error) {
	wait := min(cfg.duration/2, 30*time.Second)
	st, err := a.WaitConnections(int64(cfg.users), true, wait)
	if err != nil {
		select {
		case e := <-clientDone:
			clientDone <- e // for run, which waits for it next
			return nil, fmt.Errorf("load client ended before its users logged in")
		default:
		}
		fmt.Fprintf(stdout, "demo: only %d of %d users logged in after %v; starting the campaigns anyway\n", st.Logins, cfg.users, wait)
	}
	secs := max(1, int(time.Until(end.Add(-campaignMargin)).Seconds()))
	return a.StartCampaigns(cfg.shake, cfg.send, cfg.recips, secs, func(kind string, q url.Values, c harness.Campaign, err error) {
		if err == nil {
			fmt.Fprintf(stdout, "demo: POST /campaigns/%s?%s → campaign %d (%ds)\n", kind, q.Encode(), c.ID, secs)
		}
	})
}

// checkLedger reads /stats and /campaigns, writes them to stats.json and
// campaigns.json, and checks docs/PROTOCOL.md's invariants and that the server
// created what the campaigns dealt. Stages may still be passing the last
// events on, so it retries for a second before it reports a mismatch.
func checkLedger(a *harness.Admin, started []harness.Campaign, w io.Writer, path func(string) string) error {
	l, err := a.SettledLedger(time.Second)
	if err != nil {
		return err
	}
	os.WriteFile(path("stats.json"), l.RawStats, 0o644)
	os.WriteFile(path("campaigns.json"), l.RawCamps, 0o644)
	st, checks := &l.Stats, l.Checks
	e := &st.Envelopes
	fmt.Fprintf(w, "  logins %d, connections %d\n", st.Logins, st.Connections)
	fmt.Fprintf(w, "  shake: %d requests: %d got %d fen, %d empty, %d overloaded; created %d (%d fen), in the pool %d (%d fen)\n",
		st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.Empty, st.Shake.Overload,
		st.Shake.Created, st.Shake.CreatedAmount, st.Shake.Pool, st.Shake.PoolAmount)
	fmt.Fprintf(w, "  group envelopes: created %d (%d fen), %d shares opened (%d fen), outstanding %d fen; system envelopes skipped %d, OPEN/SEND overloaded %d\n",
		e.Created, e.CreatedAmount, e.Opened, e.OpenedAmount, e.OutstandingAmount, e.SystemSkipped, e.Overload)
	var bad []string
	for _, c := range checks {
		verdict := "ok"
		if c.Left != c.Right {
			verdict = fmt.Sprintf("MISMATCH by %+d", c.Left-c.Right)
			bad = append(bad, c.Name)
		}
		fmt.Fprintf(w, "  %-62s %12d = %-12d %s\n", c.Name, c.Left, c.Right, verdict)
	}
	if _, err := os.Stat(path("report.json")); err == nil {
		var rep struct {
			Reconcile *struct {
				OK bool `json:"ok"`
			} `json:"reconcile"`
		}
		b, _ := os.ReadFile(path("report.json"))
		if json.Unmarshal(b, &rep) != nil || rep.Reconcile == nil || !rep.Reconcile.OK {
			bad = append(bad, "the load client's reconciliation (report.json)")
		} else {
			fmt.Fprintf(w, "  %-62s %27s\n", "the load client's reconciliation with /stats", "ok")
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("ledger: %s", strings.Join(bad, "; "))
	}
	return nil
}
