package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// crashRun is one run: a harness.Run whose lines make report.md, the -data
// directory its servers share, and its checks.
type crashRun struct {
	*harness.Run
	cfg    *config
	data   string
	errs   []error
	checks []summaryCheck // every check, in order
}

type summaryCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
}

func newRun(cfg *config, prefix string, stdout, stderr io.Writer) (*crashRun, error) {
	r, err := harness.NewRun(cfg.Out, prefix, "crash", stdout, stderr)
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp("", "hongbao-crash-")
	if err != nil {
		return nil, err
	}
	return &crashRun{Run: r, cfg: cfg, data: data}, nil
}

// close writes report.md and commands.txt and removes the -data
// directory: after the servers have gone.
func (r *crashRun) close() {
	os.WriteFile(r.Path("report.md"), []byte("```\n"+strings.Join(r.Lines(), "\n")+"\n```\n"), 0o644)
	r.WriteCommands()
	os.RemoveAll(r.data)
}

// check reports one check, ok or FAILED, with what it measured.
func (r *crashRun) check(name string, ok bool, format string, args ...any) {
	verdict := "ok"
	if !ok {
		verdict = "FAILED"
		r.errs = append(r.errs, errors.New(name))
	}
	r.checks = append(r.checks, summaryCheck{name, ok})
	r.Printf("  %-44s %-6s %s", name, verdict, fmt.Sprintf(format, args...))
}

// start starts the first server, its log in server-1.log.
func (r *crashRun) start(ctx context.Context, args []string) (*harness.Server, error) {
	srv, err := r.StartServer(ctx, "server-1.log", harness.ServerConfig{Bin: r.cfg.Server(), Args: args})
	if err != nil {
		return nil, err
	}
	r.Printf("server: %s", srv.CommandLine())
	return srv, nil
}

// restart starts the server again with the same flags, its log in log
// (server-2.log, …), and returns how long it took to serve and its
// "recovered" line.
func (r *crashRun) restart(ctx context.Context, args []string, log string, timeout time.Duration) (*harness.Server, time.Duration, recovered, error) {
	t0 := time.Now()
	var rec recovered
	srv, err := r.StartServer(ctx, log, harness.ServerConfig{Bin: r.cfg.Server(), Args: args, StartTimeout: timeout})
	if err != nil {
		return nil, 0, rec, fmt.Errorf("restart: %w", err)
	}
	took := time.Since(t0)
	if err := harness.LogLine(srv.Log, "recovered", &rec); err != nil {
		srv.Kill()
		return nil, 0, rec, err
	}
	return srv, took, rec, nil
}

// ledger waits up to 2 s for both ledger invariants and the shake
// campaigns' money, and writes stats-at-end.json. Not the send campaigns'
// checks: the clients' own SENDs create group envelopes too.
func (r *crashRun) ledger(srv *harness.Server) (harness.Ledger, []harness.LedgerCheck, []string) {
	l, err := srv.Admin.SettledLedger(2*time.Second, func(st *harness.Stats, camps []harness.Campaign) []harness.LedgerCheck {
		return slices.DeleteFunc(harness.LedgerChecks(st, camps), func(c harness.LedgerCheck) bool { return strings.HasPrefix(c.Name, "send campaigns'") })
	})
	if err != nil {
		r.errs = append(r.errs, err)
	}
	os.WriteFile(r.Path("stats-at-end.json"), l.RawStats, 0o644)
	return l, l.Checks, harness.FailedChecks(l.Checks)
}

// campaigns waits for the campaigns to end and returns them with the
// check, to report in its turn, that the want of them ended at exactly
// their totals; format gets the wait and the list.
func (r *crashRun) campaigns(srv *harness.Server, want int, wait time.Duration, name, file, format string) ([]harness.Campaign, func()) {
	t0 := time.Now()
	werr := srv.Admin.WaitCampaigns(wait)
	took := time.Since(t0).Round(100 * time.Millisecond)
	list, raw, _ := srv.Admin.Campaigns()
	os.WriteFile(r.Path(file), raw, 0o644)
	return list, func() {
		r.check(name, werr == nil && harness.Exact(list, want), format, took, harness.CampaignLine(list))
	}
}

// finish stops the restarted server with SIGTERM, checks that it exits 0,
// and gives the verdict.
func (r *crashRun) finish(srv *harness.Server, timeout time.Duration, name string) error {
	code, err := srv.Stop(timeout)
	r.check("SIGTERM → exit 0", err == nil, "exit status %d", code)
	if err := errors.Join(r.errs...); err != nil {
		return err
	}
	r.Printf("%s: PASS", name)
	return nil
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

func (r recovered) snapshot() string {
	if r.Snapshot == "" {
		return "none"
	}
	return filepath.Base(r.Snapshot)
}

func (r recovered) String() string {
	return fmt.Sprintf("recovered in %v: snapshot %s, %d records replayed; pools %d envelopes %d fen, got %d fen; group envelopes held %d, live %d fen, opened %d fen; %d campaigns",
		r.took().Round(time.Microsecond), r.snapshot(), r.Records, r.Pool, r.PoolFen, r.GotFen, r.Groups, r.LiveFen, r.OpenedFen, r.Campaigns)
}

// probeUsers are the probe's users, after the load client's.
func probeUsers(cfg *config) []uint32 {
	var us []uint32
	for i := range cfg.probes {
		us = append(us, uint32(cfg.users+1+i))
	}
	return us
}

func first(ids []uint64, n int) []uint64 { return ids[:min(n, len(ids))] }

// serverArgs are the flags of every server of a run under load: snapshots
// during the load, so that the restart loads one and replays the journal
// after it (-server-flags may set another period).
func (r *crashRun) serverArgs() []string {
	return append([]string{"-data", r.data, "-snapshot-every", "3s"}, strings.Fields(r.cfg.ServerFlags)...)
}
