package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
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
	N             int       `json:"n"`
	AtS           float64   `json:"at_s"` // from the start of the load
	PID           int       `json:"pid"`  // the server killed
	ToldShakeFen  uint64    `json:"told_shake_fen"`
	ToldOpenFen   uint64    `json:"told_open_fen"`
	Recovered     recovered `json:"recovered"`      // the restart's "recovered" log line
	ServingMs     float64   `json:"serving_ms"`     // exec to the "serving" log line
	DownMs        float64   `json:"down_ms"`        // SIGKILL to serving again
	ReconnectedMs float64   `json:"reconnected_ms"` // serving to every user connected again; -1: not before the next crash
	OK            bool      `json:"ok"`             // told ≤ recovered, both
}

// runCrashes is the default run: one load client run over every crash; a
// nil error means every check passed.
func runCrashes(ctx context.Context, cfg config) error {
	r, err := newRun(&cfg, "crash-", "crash")
	if err != nil {
		return err
	}
	defer r.close()
	moments := crashMoments(cfg.duration, cfg.crashes, cfg.seed)
	shown := make([]time.Duration, len(moments))
	for i, d := range moments {
		shown[i] = d.Round(100 * time.Millisecond)
	}
	r.Printf("crash: %d users, %d SHAKE/s, %g SEND/s for %v; campaigns %d + %d a second; %d SIGKILLs at %v (seed %d); -data %s; files in %s/",
		cfg.users, cfg.qps, cfg.sendRate, cfg.duration, cfg.camps.Shake, cfg.camps.Send, cfg.crashes, shown, cfg.seed, r.data, r.Dir)
	control, err := harness.FreePorts(1)
	if err != nil {
		return err
	}
	secs := int((cfg.duration - crashLead) / time.Second)
	args := r.serverArgs()
	l, err := r.startLoad(ctx, args, fmt.Sprintf("%d@%v", cfg.qps, cfg.duration),
		[]string{"-reconcile", "at-least", "-connect-rate", "20000", "-control", control[0]}, probeUsers(&cfg), true, secs)
	if err != nil {
		return err
	}
	defer l.stop()
	pr, client := l.pr, l.client
	// Every restart on the same ports: the load client and the probe
	// reconnect to the address they know.
	args = append(args, "-listen", r.srv.Listen, "-admin", strings.TrimPrefix(r.srv.Admin.URL, "http://"))
	want := int64(cfg.users + cfg.probes)

	var recs []crashRecord
	for i, at := range moments {
		select {
		case <-time.After(time.Until(client.Start.Add(at))):
		case <-ctx.Done():
			return ctx.Err()
		case <-client.Done():
			return fmt.Errorf("the load client ended before crash %d: %v", i+1, client.Wait())
		}
		rec := crashRecord{N: i + 1, PID: r.srv.PID}
		killed := time.Now()
		rec.AtS = killed.Sub(client.Start).Seconds()
		r.srv.Kill() // SIGKILL: no final round, no snapshot, no goodbye
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

		serving, rc, err := r.restart(ctx, args, fmt.Sprintf("server-%d.log", i+2), time.Minute)
		if err != nil {
			return fmt.Errorf("crash %d: %w", i+1, err)
		}
		rec.DownMs, rec.ServingMs, rec.Recovered = harness.Millis(time.Since(killed)), harness.Millis(serving), rc
		rec.OK = uint64(rc.GotFen) >= rec.ToldShakeFen && uint64(rc.OpenedFen) >= rec.ToldOpenFen
		r.Printf("\ncrash %d at %.1f s: SIGKILL pid %d; told by then SHAKE %d fen, OPEN %d fen; restarted pid %d, serving %v after exec, %v after the kill; %s",
			rec.N, rec.AtS, rec.PID, rec.ToldShakeFen, rec.ToldOpenFen, r.srv.PID, serving.Round(time.Millisecond), time.Duration(rec.DownMs*1e6).Round(time.Millisecond), rc)
		r.check(fmt.Sprintf("crash %d: told ≤ recovered", rec.N), rec.OK, "SHAKE %d ≤ %d (+%d), OPEN %d ≤ %d (+%d)",
			rec.ToldShakeFen, rc.GotFen, rc.GotFen-int64(rec.ToldShakeFen), rec.ToldOpenFen, rc.OpenedFen, rc.OpenedFen-int64(rec.ToldOpenFen))
		rec.ReconnectedMs = -1
		until, next := client.Start.Add(cfg.duration), "the end of the load"
		if i+1 < len(moments) {
			until, next = client.Start.Add(moments[i+1]), "the next crash"
		}
		t0 := time.Now()
		if _, err := r.srv.Admin.WaitConnections(want, true, max(0, until.Sub(t0))); err == nil {
			rec.ReconnectedMs = harness.Millis(time.Since(t0))
			r.Printf("  every user connected again %v after serving", time.Since(t0).Round(time.Millisecond))
		} else {
			r.Printf("  not every user connected again before %s", next)
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
	l.stop()
	pShake, pOpen := pr.told()
	toldShake, toldOpen := lr.ShakeAmount+pShake, lr.OpenAmount+pOpen
	r.Printf("\nload client: %d SHAKEs answered got (%d fen), %d OPENs ok (%d fen) over the run; probe: %d shake + %d group envelope ids, %d shares drawn, %d drawn again after a reconnect",
		answers(lr, "SHAKE", "1"), lr.ShakeAmount, answers(lr, "OPEN", "0"), lr.OpenAmount, len(pr.shakeIDs), len(pr.groupIDs), len(pr.opened), pr.reopened)
	r.Printf("\nchecks:")
	okCrashes := 0
	for _, rec := range recs {
		back := "not before the next crash"
		if rec.ReconnectedMs >= 0 {
			back = fmt.Sprintf("%.0f ms after serving", rec.ReconnectedMs)
		}
		r.Printf("  crash %d at %5.1f s: recovered in %7.2f ms (%d records, snapshot %s), serving %7.1f ms after exec, %7.1f ms after the kill; users back %s",
			rec.N, rec.AtS, harness.Millis(rec.Recovered.took()), rec.Recovered.Records, rec.Recovered.snapshot(), rec.ServingMs, rec.DownMs, back)
		if rec.OK {
			okCrashes++
		}
	}
	list := r.campaigns(len(l.camps), time.Duration(secs)*time.Second+time.Minute, "campaigns-at-end.json")
	st := r.ledger()
	r.check("every crash: told ≤ recovered", okCrashes == len(recs), "%d of %d crashes", okCrashes, len(recs))
	// Exact: every request a kill left unanswered was sent again with its
	// request id, and told what the server counted.
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
	err = r.finish(30 * time.Second)

	b, _ := json.MarshalIndent(map[string]any{ // summary.json
		"users": cfg.users, "qps": cfg.qps, "duration": cfg.duration.String(), "seed": cfg.seed, "crashes": recs,
		"shakes_answered": answers(lr, "SHAKE", ""), "told_shake_fen": toldShake, "counted_shake_fen": st.Shake.GotAmount,
		"told_open_fen": toldOpen, "counted_open_fen": st.Envelopes.OpenedAmount, "probe_shake_ids": len(pr.shakeIDs),
		"probe_group_ids": len(pr.groupIDs), "probe_opened": len(pr.opened), "probe_reopened_same_share": pr.reopened,
		"twice": pr.twice, "campaigns": list, "checks": r.checks, "pass": err == nil, "load_client_report": "report.json",
	}, "", "  ")
	os.WriteFile(r.Path("summary.json"), append(b, '\n'), 0o644)
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

// clientTold is the money the load client was told by its last tick, from
// its -control /metrics: Σ SHAKE_RESULT 1 and Σ OPEN_RESULT 0 amounts.
func clientTold(control string) (shake, open uint64, err error) {
	m, err := harness.NewAdmin(control).Metrics()
	s, ok := m["loadclient_shake_amount_total"]
	o, ok2 := m["loadclient_open_amount_total"]
	if err == nil && !(ok && ok2) {
		err = errors.New("no shake and open amounts")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("the load client's /metrics: %w", err)
	}
	return uint64(s), uint64(o), nil
}
