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
	"slices"
	"strings"
	"syscall"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// run is the crash run under load; a nil error means every check passed.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := newRun(cfg.Out, "crash-", stdout)
	if err != nil {
		return err
	}
	defer r.close()
	r.printf("crash: %d users, %d SHAKE/s, %g SEND/s; campaigns %d + %d a second; SIGKILL after %v; -data %s; files in %s/",
		cfg.users, cfg.qps, cfg.sendRate, cfg.shakeRate, cfg.sendCamp, cfg.killAfter, r.data, r.dir)

	// Snapshots during the load: the restart loads the last one and replays
	// the journal after it (-server-flags may set another period).
	args := append([]string{"-data", r.data, "-snapshot-every", "3s"}, strings.Fields(cfg.ServerFlags)...)
	srv, err := r.start(ctx, cfg, args, stderr)
	if err != nil {
		return err
	}
	defer srv.Kill()

	client, err := harness.StartClient(ctx, srv, harness.ClientConfig{
		Bin: filepath.Join(cfg.Bin, "loadclient"), Dir: r.dir, Users: cfg.users,
		Phases: fmt.Sprintf("%d@%v", cfg.qps, cfg.killAfter+time.Minute),
		Flags: []string{"-send-rate", fmt.Sprint(cfg.sendRate), "-send-recipients", "3", "-reconcile", "off", "-quiet",
			"-connect-timeout", "2s"},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	r.printf("load client: %s", client.CommandLine())
	if _, err := srv.Admin.WaitConnections(int64(cfg.users), true, 60*time.Second); err != nil {
		return fmt.Errorf("before the campaigns: %w", err)
	}
	secs := int((cfg.killAfter + 5*time.Second) / time.Second)
	camps, err := srv.Admin.StartCampaigns(cfg.shakeRate, cfg.sendCamp, cfg.recipients, secs, func(kind string, q url.Values, c harness.Campaign, err error) {
		if err == nil {
			r.printf("POST /campaigns/%s?%s → campaign %d", kind, q.Encode(), c.ID)
		}
	})
	if err != nil {
		return err
	}
	pr := newProbe()
	stopProbe := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		pr.run(srv.Listen, probeUsers(cfg), []uint32{1, 2}, stopProbe, false)
	}()

	select {
	case <-time.After(cfg.killAfter):
	case <-ctx.Done():
		return ctx.Err()
	case err := <-client.Done:
		return fmt.Errorf("the load client ended before the kill: %v", err)
	}
	before, _, _ := srv.Admin.Campaigns()
	pr.killed.Store(true)
	killed := time.Now()
	srv.Kill() // SIGKILL: no final round, no snapshot, no goodbye
	r.printf("\nSIGKILL server pid %d at %s; campaigns then: %s", srv.PID, killed.Format(time.RFC3339), campaignLine(before))
	<-probed
	client.Cmd.Process.Signal(syscall.SIGTERM) // it reports what it was told
	if err := <-client.Done; err != nil {
		r.printf("load client: %v (expected: its server is gone)", err)
	}
	lr, err := readClientReport(r.path("report.json"))
	if err != nil {
		return err
	}
	toldShake, toldOpen := lr.ShakeAmount+pr.shakeFen, lr.OpenAmount+pr.openFen
	r.printf("told before the kill: SHAKE_RESULT 1 %d fen (load client %d, probe %d), OPEN_RESULT 0 %d fen (load client %d, probe %d)",
		toldShake, lr.ShakeAmount, pr.shakeFen, toldOpen, lr.OpenAmount, pr.openFen)

	srv2, startTook, rec, err := r.restart(ctx, cfg, args, "server-2.log", time.Minute, stderr)
	if err != nil {
		return err
	}
	defer srv2.Kill()
	st, raw, err := srv2.Admin.Stats()
	if err != nil {
		return err
	}
	os.WriteFile(r.path("stats-after-restart.json"), raw, 0o644)
	r.printf("restart: serving %v after exec; %s", startTook.Round(time.Millisecond), rec)

	r.printf("\nchecks:")
	got, opened := uint64(st.Shake.GotAmount), uint64(st.Envelopes.OpenedAmount)
	r.check("SHAKE money told ≤ counted", got >= toldShake, "told %d fen, counted %d (got_amount): %d counted, never told", toldShake, got, int64(got)-int64(toldShake))
	r.check("OPEN money told ≤ counted", opened >= toldOpen, "told %d fen, counted %d (opened_amount): %d counted, never told", toldOpen, opened, int64(opened)-int64(toldOpen))
	r.check("the probe got envelopes before the kill", len(pr.shakeIDs) > 0 && len(pr.groupIDs) > 0, "%d shake and %d group envelope ids", len(pr.shakeIDs), len(pr.groupIDs))

	// After the restart: the probe again, its ids against those before.
	after := newProbe()
	stop2 := make(chan struct{})
	time.AfterFunc(2*time.Second, func() { close(stop2) })
	after.run(srv2.Listen, probeUsers(cfg), probeUsers(cfg), stop2, false)
	r.errs = append(r.errs, pr.err(), after.err())
	reused := append(disjoint(pr.shakeIDs, after.shakeIDs), disjoint(pr.groupIDs, after.groupIDs)...)
	reused = append(reused, append(pr.twice, after.twice...)...)
	r.check("no envelope id handed out twice", len(reused) == 0, "%d shake + %d group ids before, %d + %d after the restart; %d reused %v",
		len(pr.shakeIDs), len(pr.groupIDs), len(after.shakeIDs), len(after.groupIDs), len(reused), first(reused, 5))

	resumed := time.Now()
	werr := srv2.Admin.WaitCampaigns(time.Duration(secs)*time.Second + 30*time.Second)
	list, rawCamps, _ := srv2.Admin.Campaigns()
	os.WriteFile(r.path("campaigns-after-restart.json"), rawCamps, 0o644)
	exact := werr == nil && len(list) == len(camps)
	for _, c := range list {
		exact = exact && c.Done && c.Dealt == c.Total
	}
	r.check("campaigns resumed, ended at their totals", exact, "after %v: %s", time.Since(resumed).Round(100*time.Millisecond), campaignLine(list))
	// The two invariants and the shake campaigns' money; not the send
	// campaigns' counts: the clients' own SENDs create group envelopes too.
	var bad []string
	var checks []harness.LedgerCheck
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l, err := srv2.Admin.SettledLedger(0)
		if err != nil {
			r.errs = append(r.errs, err)
			break
		}
		checks = slices.DeleteFunc(l.Checks, func(c harness.LedgerCheck) bool { return strings.HasPrefix(c.Name, "send campaigns'") })
		if bad = harness.FailedChecks(checks); len(bad) == 0 || time.Now().After(deadline) {
			os.WriteFile(r.path("stats-at-end.json"), l.RawStats, 0o644)
			break
		}
	}
	r.check("ledger invariants after the campaigns", len(bad) == 0, "%d checks (both invariants, shake campaigns' amount), failing: %v", len(checks), bad)
	return r.finish(srv2, 30*time.Second, "crash")
}

// probeUsers are the probe's users, after the load client's.
func probeUsers(cfg config) []uint32 {
	var us []uint32
	for i := range cfg.probes {
		us = append(us, uint32(cfg.users+1+i))
	}
	return us
}

func (p *probe) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

func first(ids []uint64, n int) []uint64 { return ids[:min(n, len(ids))] }

func campaignLine(list []harness.Campaign) string {
	var parts []string
	for _, c := range list {
		state := "running"
		if c.Done {
			state = "done"
		}
		parts = append(parts, fmt.Sprintf("%d %s %d/%d %s", c.ID, c.Kind, c.Dealt, c.Total, state))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func readClientReport(path string) (loadclient.Report, error) {
	var r loadclient.Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("the load client's report: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("the load client's report: %w", err)
	}
	return r, nil
}

// recovered is the server's "recovered" log line.
type recovered struct {
	Snapshot  string `json:"snapshot"`
	Records   int64  `json:"records_replayed"`
	TookNs    int64  `json:"took"`
	Pool      int64  `json:"pool_envelopes"`
	PoolFen   int64  `json:"pool_fen"`
	GotFen    int64  `json:"shake_got_fen"`
	Groups    int64  `json:"group_envelopes_held"`
	LiveFen   int64  `json:"group_live_fen"`
	OpenedFen int64  `json:"opened_fen"`
	Campaigns int    `json:"campaigns"`
}

func (r recovered) took() time.Duration { return time.Duration(r.TookNs) }

func (r recovered) String() string {
	snap := r.Snapshot
	if snap == "" {
		snap = "none"
	}
	return fmt.Sprintf("recovered in %v: snapshot %s, %d records replayed; pools %d envelopes %d fen, got %d fen; group envelopes held %d, live %d fen, opened %d fen; %d campaigns",
		r.took().Round(time.Microsecond), filepath.Base(snap), r.Records, r.Pool, r.PoolFen, r.GotFen, r.Groups, r.LiveFen, r.OpenedFen, r.Campaigns)
}

func recoveredLine(log string) (recovered, error) {
	var r recovered
	b, err := os.ReadFile(log)
	if err != nil {
		return r, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "recovered" {
			return r, json.Unmarshal(sc.Bytes(), &r)
		}
	}
	return r, fmt.Errorf("no \"recovered\" line in %s", log)
}
