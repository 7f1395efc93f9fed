package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// The crash moments: after crashLead of load (the connects, the campaigns
// started), before the last crashTail of it (load after the last restart),
// one in each of -crashes equal slots, within its middle 60 %: two crashes
// are at least 40 % of a slot apart.
const (
	crashLead = 10 * time.Second
	crashTail = 15 * time.Second
	minSlot   = 8 * time.Second
)

// crashSlot is the time between the slots' starts.
func crashSlot(duration time.Duration, crashes int) time.Duration {
	if crashes < 1 {
		return 0
	}
	return (duration - crashLead - crashTail) / time.Duration(crashes)
}

// crashMoments returns the kills' offsets from the start of the load, in
// order, the same for the same seed.
func crashMoments(duration time.Duration, crashes int, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x6372617368))
	slot := crashSlot(duration, crashes)
	var at []time.Duration
	for i := range crashes {
		at = append(at, crashLead+time.Duration(i)*slot+slot/5+time.Duration(rng.Int64N(int64(slot)*3/5+1)))
	}
	return at
}

// crashRecord is one kill and the restart after it.
type crashRecord struct {
	N             int     `json:"n"`
	AtS           float64 `json:"at_s"` // from the start of the load
	PID           int     `json:"pid"`  // the server killed
	ToldShakeFen  uint64  `json:"told_shake_fen"`
	ToldOpenFen   uint64  `json:"told_open_fen"`
	RecGotFen     int64   `json:"recovered_shake_got_fen"`
	RecOpenedFen  int64   `json:"recovered_opened_fen"`
	RecoveredMs   float64 `json:"recovered_ms"`   // the "recovered" log line's took
	ServingMs     float64 `json:"serving_ms"`     // exec to the "serving" log line
	DownMs        float64 `json:"down_ms"`        // SIGKILL to serving again
	ReconnectedMs float64 `json:"reconnected_ms"` // serving to every user connected again; -1: not before the next crash
	Records       int64   `json:"records_replayed"`
	Snapshot      string  `json:"snapshot"`
	OK            bool    `json:"ok"` // told ≤ recovered, both
}

// crashSummary is summary.json.
type crashSummary struct {
	Users            int                `json:"users"`
	QPS              int                `json:"qps"`
	Duration         string             `json:"duration"`
	Seed             uint64             `json:"seed"`
	Crashes          []crashRecord      `json:"crashes"`
	ShakesAnswered   uint64             `json:"shakes_answered"`
	ToldShakeFen     uint64             `json:"told_shake_fen"`
	CountedShakeFen  int64              `json:"counted_shake_fen"`
	ToldOpenFen      uint64             `json:"told_open_fen"`
	CountedOpenFen   int64              `json:"counted_open_fen"`
	ProbeShakeIDs    int                `json:"probe_shake_ids"`
	ProbeGroupIDs    int                `json:"probe_group_ids"`
	ProbeOpened      int                `json:"probe_opened"`
	ProbeReopened    int                `json:"probe_reopened_same_share"`
	Twice            []uint64           `json:"twice"`
	Campaigns        []harness.Campaign `json:"campaigns"`
	Checks           []summaryCheck     `json:"checks"`
	Pass             bool               `json:"pass"`
	LoadClientReport string             `json:"load_client_report"`
}

// runCrashes is the default run: one load client run over every crash; a
// nil error means every check passed.
func runCrashes(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	r, err := newRun(&cfg, "crash-", stdout, stderr)
	if err != nil {
		return err
	}
	defer r.close()
	moments := crashMoments(cfg.duration, cfg.crashes, cfg.seed)
	r.Printf("crash: %d users, %d SHAKE/s, %g SEND/s for %v; campaigns %d + %d a second; %d SIGKILLs at %v (seed %d); -data %s; files in %s/",
		cfg.users, cfg.qps, cfg.sendRate, cfg.duration, cfg.camps.Shake, cfg.camps.Send, cfg.crashes, roundAll(moments), cfg.seed, r.data, r.Dir)
	args := r.serverArgs()
	srv, err := r.start(ctx, args)
	if err != nil {
		return err
	}
	defer func() { srv.Kill() }()
	// Every restart on the same ports: the load client and the probe
	// reconnect to the address they know.
	args = append(args, "-listen", srv.Listen, "-admin", strings.TrimPrefix(srv.Admin.URL, "http://"))
	control, err := harness.FreePorts(1)
	if err != nil {
		return err
	}
	client, err := r.StartClient(ctx, srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users), Phases: fmt.Sprintf("%d@%v", cfg.qps, cfg.duration), Aligned: true,
		Flags: []string{"-send-rate", fmt.Sprint(cfg.sendRate), "-send-recipients", "3", "-reconcile", "at-least", "-quiet",
			"-connect-timeout", "2s", "-connect-rate", "20000", "-control", control[0]},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	r.Printf("load client: %s", client.CommandLine())
	want := int64(cfg.users + cfg.probes)
	pr := newProbe()
	stopProbe := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		pr.run(srv.Listen, probeUsers(&cfg), probeUsers(&cfg), stopProbe, true)
	}()
	stop := sync.OnceFunc(func() { close(stopProbe); <-probed })
	defer stop()
	if _, err := srv.Admin.WaitConnections(want, true, 60*time.Second); err != nil {
		return fmt.Errorf("before the campaigns: %w", err)
	}
	secs := int((cfg.duration - crashLead) / time.Second)
	camps, err := r.StartCampaigns(srv.Admin, cfg.camps, secs, "")
	if err != nil {
		return err
	}

	var recs []crashRecord
	for i, at := range moments {
		select {
		case <-time.After(time.Until(client.Start.Add(at))):
		case <-ctx.Done():
			return ctx.Err()
		case <-client.Done():
			return fmt.Errorf("the load client ended before crash %d: %v", i+1, client.Wait())
		}
		rec := crashRecord{N: i + 1, PID: srv.PID}
		killed := time.Now()
		rec.AtS = killed.Sub(client.Start).Seconds()
		srv.Kill() // SIGKILL: no final round, no snapshot, no goodbye
		// What the clients were told before the kill: the load client's
		// figures of its first tick after it (ticks at whole seconds from its
		// start), which can hold no answer of a later server.
		time.Sleep(time.Until(killed.Add(100 * time.Millisecond).Truncate(time.Second).Add(time.Second + 300*time.Millisecond)))
		lcShake, lcOpen, err := clientTold(control[0])
		if err != nil {
			return fmt.Errorf("crash %d: %w", i+1, err)
		}
		pShake, pOpen := pr.told()
		rec.ToldShakeFen, rec.ToldOpenFen = lcShake+pShake, lcOpen+pOpen

		next, serving, rc, err := r.restart(ctx, args, fmt.Sprintf("server-%d.log", i+2), time.Minute)
		if err != nil {
			return fmt.Errorf("crash %d: %w", i+1, err)
		}
		srv = next
		rec.DownMs = harness.Millis(time.Since(killed))
		rec.ServingMs, rec.RecoveredMs = harness.Millis(serving), harness.Millis(rc.took())
		rec.Records, rec.Snapshot = rc.Records, rc.snapshot()
		rec.RecGotFen, rec.RecOpenedFen = rc.GotFen, rc.OpenedFen
		rec.OK = uint64(rc.GotFen) >= rec.ToldShakeFen && uint64(rc.OpenedFen) >= rec.ToldOpenFen
		r.Printf("\ncrash %d at %.1f s: SIGKILL pid %d; told by then SHAKE %d fen, OPEN %d fen; restarted pid %d, serving %v after exec, %v after the kill; %s",
			rec.N, rec.AtS, rec.PID, rec.ToldShakeFen, rec.ToldOpenFen, srv.PID, serving.Round(time.Millisecond), time.Duration(rec.DownMs*1e6).Round(time.Millisecond), rc)
		r.check(fmt.Sprintf("crash %d: told ≤ recovered", rec.N), rec.OK, "SHAKE %d ≤ %d (+%d), OPEN %d ≤ %d (+%d)",
			rec.ToldShakeFen, rc.GotFen, rc.GotFen-int64(rec.ToldShakeFen), rec.ToldOpenFen, rc.OpenedFen, rc.OpenedFen-int64(rec.ToldOpenFen))
		rec.ReconnectedMs = -1
		until, next1 := client.Start.Add(cfg.duration), "the end of the load"
		if i+1 < len(moments) {
			until, next1 = client.Start.Add(moments[i+1]), "the next crash"
		}
		if took, ok := waitConnected(srv.Admin, want, until); ok {
			rec.ReconnectedMs = harness.Millis(took)
			r.Printf("  every user connected again %v after serving", took.Round(time.Millisecond))
		} else {
			r.Printf("  not every user connected again before %s", next1)
		}
		recs = append(recs, rec)
	}

	// The end: the load client's report (what it was told over the whole run),
	// the probe stopped, the campaigns finished.
	select {
	case <-client.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	lcErr := client.Wait()
	if lcErr != nil {
		r.Printf("\nload client: %v", lcErr)
	}
	lr, err := client.ReadReport()
	if err != nil {
		return err
	}
	stop()
	pShake, pOpen := pr.told()
	toldShake, toldOpen := lr.ShakeAmount+pShake, lr.OpenAmount+pOpen
	r.Printf("\nload client: %d SHAKEs answered got (%d fen), %d OPENs ok (%d fen) over the run; probe: %d shake + %d group envelope ids, %d shares drawn, %d drawn again after a reconnect",
		answers(lr, "SHAKE", "1"), lr.ShakeAmount, answers(lr, "OPEN", "0"), lr.OpenAmount, len(pr.shakeIDs), len(pr.groupIDs), len(pr.opened), pr.reopened)
	r.Printf("\nchecks:")
	for _, rec := range recs {
		r.Printf("  crash %d at %5.1f s: recovered in %7.2f ms (%d records, snapshot %s), serving %7.1f ms after exec, %7.1f ms after the kill; users back %s",
			rec.N, rec.AtS, rec.RecoveredMs, rec.Records, rec.Snapshot, rec.ServingMs, rec.DownMs, msOrNot(rec.ReconnectedMs))
	}
	okCrashes := 0
	for _, rec := range recs {
		if rec.OK {
			okCrashes++
		}
	}
	list, checkCampaigns := r.campaigns(srv, len(camps), time.Duration(secs)*time.Second+time.Minute, "campaigns ended at exactly their totals", "campaigns-at-end.json", "%v after the load: %s")
	ledger, checks, bad := r.ledger(srv)
	st := ledger.Stats
	r.check("every crash: told ≤ recovered", okCrashes == len(recs), "%d of %d crashes", okCrashes, len(recs))
	// Exact: every request a kill left unanswered was sent again with its
	// request id (SHAKE) or again (OPEN), and told what the server counted.
	r.check("SHAKE money told == counted", uint64(st.Shake.GotAmount) == toldShake, "told %d fen (load client %d, probe %d), counted %d (got_amount): %d counted, never told; load client SHAKEs sent again %d, never sent again %d",
		toldShake, lr.ShakeAmount, pShake, st.Shake.GotAmount, st.Shake.GotAmount-int64(toldShake), lr.ShakeResent, lr.ShakeUnresolved)
	r.check("OPEN money told == counted", uint64(st.Envelopes.OpenedAmount) == toldOpen, "told %d fen (load client %d, probe %d), counted %d (opened_amount): %d counted, never told; load client opens unresolved %d",
		toldOpen, lr.OpenAmount, pOpen, st.Envelopes.OpenedAmount, st.Envelopes.OpenedAmount-int64(toldOpen), lr.OpenUnresolved)
	lcSummary := "no reconciliation in its report"
	if lr.Reconcile != nil {
		lcSummary = lr.Reconcile.Summary()
	}
	r.check("load client: -reconcile at-least, exit 0", lcErr == nil && harness.Reconciled(lr), "%s", lcSummary)
	r.errs = append(r.errs, pr.err())
	r.check("the probe got envelopes", len(pr.shakeIDs) > 0 && len(pr.groupIDs) > 0 && len(pr.opened) > 0, "%d shake ids, %d group ids, %d shares",
		len(pr.shakeIDs), len(pr.groupIDs), len(pr.opened))
	r.check("no envelope id handed out twice, no share drawn twice", len(pr.twice) == 0, "%d twice %v", len(pr.twice), first(pr.twice, 5))
	r.check("a re-OPEN after a restart: already, same share", len(pr.badOpen) == 0 && pr.reopened > 0, "%d answered 1 with the same share; %d otherwise %v",
		pr.reopened, len(pr.badOpen), pr.badOpen[:min(3, len(pr.badOpen))])
	checkCampaigns()
	r.check("both ledger invariants, shake campaigns' money", len(bad) == 0, "%d checks, failing: %v", len(checks), bad)
	err = r.finish(srv, 30*time.Second, "crash")

	sum := crashSummary{
		Users: cfg.users, QPS: cfg.qps, Duration: cfg.duration.String(), Seed: cfg.seed,
		Crashes: recs, ShakesAnswered: answers(lr, "SHAKE", ""), ToldShakeFen: toldShake, CountedShakeFen: st.Shake.GotAmount,
		ToldOpenFen: toldOpen, CountedOpenFen: st.Envelopes.OpenedAmount,
		ProbeShakeIDs: len(pr.shakeIDs), ProbeGroupIDs: len(pr.groupIDs), ProbeOpened: len(pr.opened), ProbeReopened: pr.reopened,
		Twice: pr.twice, Campaigns: list, Checks: r.checks, Pass: err == nil, LoadClientReport: "report.json",
	}
	if b, jerr := json.MarshalIndent(sum, "", "  "); jerr == nil {
		os.WriteFile(r.Path("summary.json"), append(b, '\n'), 0o644)
	}
	return err
}

// answers is the load client's answers to kind with status ("": all).
func answers(lr *loadclient.Report, kind, status string) uint64 {
	rq := lr.Requests[kind]
	if rq == nil {
		return 0
	}
	if status == "" {
		return rq.Answered
	}
	return rq.Status[status]
}

// clientTold reads the money the load client was told from its -control
// /metrics: Σ SHAKE_RESULT 1 and Σ OPEN_RESULT 0 amounts of its last tick.
func clientTold(control string) (shake, open uint64, err error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + control + "/metrics")
	if err != nil {
		return 0, 0, fmt.Errorf("the load client's /metrics: %w", err)
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		var dst *uint64
		switch name {
		case "loadclient_shake_amount_total":
			dst = &shake
		case "loadclient_open_amount_total":
			dst = &open
		}
		if !ok || dst == nil {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("the load client's /metrics: %s: %w", name, err)
		}
		*dst = uint64(f)
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("the load client's /metrics: no shake and open amounts")
	}
	return shake, open, sc.Err()
}

// waitConnected polls /stats until the server has want connections or until
// passes, and returns how long that took.
func waitConnected(a *harness.Admin, want int64, until time.Time) (time.Duration, bool) {
	t0 := time.Now()
	for time.Now().Before(until) {
		if st, _, err := a.Stats(); err == nil && st.Connections >= want && st.Logins >= want {
			return time.Since(t0), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, false
}

func msOrNot(v float64) string {
	if v < 0 {
		return "not before the next crash"
	}
	return fmt.Sprintf("%.0f ms after serving", v)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond)
	}
	return out
}
