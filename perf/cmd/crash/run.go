package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// crashRun is one run: a harness.Run whose lines and checks make report.md,
// the -data directory its servers share, and the server running now.
type crashRun struct {
	*harness.Run
	cfg    *config
	title  string
	data   string
	srv    *harness.Server
	errs   []error
	checks []summaryCheck
}

type summaryCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func newRun(cfg *config, prefix, title string) (*crashRun, error) {
	r, err := harness.NewRun(cfg.Out, prefix, "crash", os.Stdout, os.Stderr)
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp("", "hongbao-crash-")
	if err != nil {
		return nil, err
	}
	return &crashRun{Run: r, cfg: cfg, title: title, data: data}, nil
}

// close kills the server still running, writes report.md and commands.txt
// and removes the -data directory.
func (r *crashRun) close() {
	if r.srv != nil {
		r.srv.Kill()
	}
	t := &harness.Table{Head: []string{"check", "verdict", "measured"}}
	for _, c := range r.checks {
		t.Add(c.Name, harness.Verdict(c.OK), c.Detail)
	}
	d := harness.Doc{harness.H1(r.title), harness.H2("Checks"), t, harness.H2("Run"), harness.Code(strings.Join(r.Lines(), "\n"))}
	os.WriteFile(r.Path("report.md"), []byte(d.Markdown()), 0o644)
	r.WriteCommands()
	os.RemoveAll(r.data)
}

// check reports one check, ok or FAILED, with what it measured.
func (r *crashRun) check(name string, ok bool, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	if !ok {
		r.errs = append(r.errs, errors.New(name))
	}
	r.checks = append(r.checks, summaryCheck{name, ok, detail})
	r.Printf("  %-44s %-6s %s", name, harness.Verdict(ok), detail)
}

// serverArgs are the flags of every server of a run under load: snapshots
// during the load, so that a restart loads one and replays the journal
// after it (-server-flags may set another period).
func (r *crashRun) serverArgs() []string {
	return append([]string{"-data", r.data, "-snapshot-every", "3s"}, strings.Fields(r.cfg.ServerFlags)...)
}

// start starts the server with args, its log in log, and returns how long
// it took to serve.
func (r *crashRun) start(ctx context.Context, log string, args []string, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	srv, err := r.StartServer(ctx, log, harness.ServerConfig{Bin: r.cfg.Server(), Args: args, StartTimeout: timeout})
	if err != nil {
		return 0, err
	}
	r.srv = srv
	return time.Since(t0), nil
}

// restart starts the server again, and returns how long it took to serve
// and its "recovered" line.
func (r *crashRun) restart(ctx context.Context, args []string, log string, timeout time.Duration) (time.Duration, recovered, error) {
	var rec recovered
	took, err := r.start(ctx, log, args, timeout)
	if err != nil {
		return 0, rec, fmt.Errorf("restart: %w", err)
	}
	return took, rec, harness.LogLine(r.srv.Log, "recovered", &rec)
}

// load is the server, the load client, the probe and the campaigns of a run
// under load.
type load struct {
	client *harness.Client
	camps  []harness.Campaign
	pr     *probe
	stop   func() // stops the probe and waits for it
}

// startLoad starts the first server with args, the load client (phases,
// flags) and the probe (its SENDs to recipients), and once they are all
// in the campaigns for secs.
func (r *crashRun) startLoad(ctx context.Context, args []string, phases string, flags []string, recipients []uint32, reconnect bool, secs int) (*load, error) {
	cfg := r.cfg
	if _, err := r.start(ctx, "server-1.log", args, 0); err != nil {
		return nil, err
	}
	r.Printf("server: %s", r.srv.CommandLine())
	client, err := r.StartClient(ctx, r.srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users), Phases: phases, Aligned: true,
		Flags:  append([]string{"-send-rate", fmt.Sprint(cfg.sendRate), "-send-recipients", "3", "-quiet", "-connect-timeout", "2s"}, flags...),
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	r.Printf("load client: %s", client.CommandLine())
	l := &load{client: client, pr: newProbe()}
	stop, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		l.pr.run(r.srv.Listen, probeUsers(cfg), recipients, stop, reconnect)
	}()
	l.stop = sync.OnceFunc(func() { close(stop); <-probed })
	if _, err := r.srv.Admin.WaitConnections(int64(cfg.users+cfg.probes), true, 60*time.Second); err != nil {
		l.stop()
		return nil, fmt.Errorf("before the campaigns: %w", err)
	}
	if l.camps, err = r.StartCampaigns(r.srv.Admin, cfg.camps, secs, ""); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// ledger waits up to 2 s for both ledger invariants and the shake
// campaigns' money, checks them and writes stats-at-end.json. Not the send
// campaigns' checks: the clients' own SENDs create group envelopes too.
func (r *crashRun) ledger() harness.Stats {
	l, err := r.srv.Admin.SettledLedger(2*time.Second, func(st *harness.Stats, camps []harness.Campaign) []harness.LedgerCheck {
		return slices.DeleteFunc(harness.LedgerChecks(st, camps), func(c harness.LedgerCheck) bool { return strings.HasPrefix(c.Name, "send campaigns'") })
	})
	if err != nil {
		r.errs = append(r.errs, err)
	}
	os.WriteFile(r.Path("stats-at-end.json"), l.RawStats, 0o644)
	bad := harness.FailedChecks(l.Checks)
	r.check("both ledger invariants, shake campaigns' money", len(bad) == 0, "%d checks, failing: %v", len(l.Checks), bad)
	return l.Stats
}

// campaigns waits for the campaigns to end, writes them to file, checks
// that want of them ended at exactly their totals and returns them.
func (r *crashRun) campaigns(want int, wait time.Duration, file string) []harness.Campaign {
	t0 := time.Now()
	werr := r.srv.Admin.WaitCampaigns(wait)
	list, raw, _ := r.srv.Admin.Campaigns()
	os.WriteFile(r.Path(file), raw, 0o644)
	r.check("campaigns ended at exactly their totals", werr == nil && harness.Exact(list, want), "after %v: %s",
		time.Since(t0).Round(100*time.Millisecond), harness.CampaignLine(list))
	return list
}

// finish stops the server with SIGTERM, checks that it exits 0, and gives
// the verdict.
func (r *crashRun) finish(timeout time.Duration) error {
	code, err := r.srv.Stop(timeout)
	r.check("SIGTERM → exit 0", err == nil, "exit status %d", code)
	if err := errors.Join(r.errs...); err != nil {
		return err
	}
	r.Printf("%s: PASS", r.title)
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
