package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// line is a fault in one line.
func (f *fault) line() string {
	what := map[string]string{"kill": "kill -9", "stop": "SIGSTOP past the lease", "nats": "NATS server killed"}[f.Kind]
	sets := fmt.Sprintf("SETs %v moved", f.Moved)
	if f.Kind == "nats" {
		sets = "every SET"
	}
	fenced := ""
	if f.Kind == "stop" {
		fenced = fmt.Sprintf("; %d money answers from the fenced gateway (of %d answers to %d witnessed SETs)", f.Fenced, f.Answers, f.Witnessed)
	}
	return fmt.Sprintf("%s of %s: %s; first money answer after the fault max %s, median %.0f ms; longest without money %.0f ms; money counted before %d (≥ told by then), after %d%s: %s",
		what, f.Target, sets, f.maxFirst(), f.MedMs, f.GapMs, f.Before, f.After, fenced, harness.Verdict(len(f.Problems) == 0))
}

// maxFirst is the largest first-money time, or how many SETs had none.
func (f *fault) maxFirst() string {
	if n := len(f.Measured) - len(f.FirstMs); n > 0 {
		return fmt.Sprintf("none from %d", n)
	}
	return fmt.Sprintf("%.0f ms", f.MaxMs)
}

// report is the report: the faults, the load client, the money, the
// ledger and the JetStream audit.
func report(res *result, cfg config) *steprun.Text {
	b := &steprun.Text{}
	b.P("\ndemofailover %s: 3 NATS servers, %d gateways, %d SETs, -replicas %d, -lease %v, -standby=%v", time.Now().UTC().Format(time.RFC3339), gateways, cfg.Sets, cfg.Replicas, cfg.Lease, cfg.standby)
	b.P("load: %s\n", res.Load)
	t := &harness.Table{Right: true, Head: []string{"#", "fault", "at", "SETs timed", "first money max", "median", "longest gap", "takeover max", "counted before", "after", "fenced money", "verdict"}}
	for i, f := range res.Faults {
		what := map[string]string{"kill": "kill -9 ", "stop": "SIGSTOP ", "nats": ""}[f.Kind] + f.Target
		took := 0.0
		for _, tk := range f.Took {
			took = max(took, tk.Ms)
		}
		t.Add(fmt.Sprint(i+1), what, fmt.Sprintf("+%.1fs", f.AtS), fmt.Sprint(len(f.Measured)), f.maxFirst(), fmt.Sprintf("%.0f ms", f.MedMs),
			fmt.Sprintf("%.0f ms", f.GapMs), fmt.Sprintf("%.1f ms", took), fmt.Sprint(f.Before), fmt.Sprint(f.After), fmt.Sprint(f.Fenced), harness.Verdict(len(f.Problems) == 0))
	}
	b.WriteString(t.Text())
	var kills []string
	var v []float64
	for _, f := range res.Faults {
		if f.Kind == "kill" && len(f.FirstMs) == len(f.Measured) && len(f.Measured) > 0 {
			kills, v = append(kills, fmt.Sprintf("%.0f ms", f.MaxMs)), append(v, f.MaxMs)
		}
	}
	if _, med := harness.MaxMedian(v); len(kills) > 0 {
		b.P("\nfailover of the kill -9 faults (the fault to the last moved SET's first money answer): median %.0f ms of %d: %s", med, len(kills), strings.Join(kills, ", "))
	}
	b.P("\nfirst money: from the fault to the first SHAKE_RESULT 1 a probe got from each timed SET (moved SETs; NATS: every SET);")
	b.P("longest gap: the longest any SET's probe went without one, from the fault to the window's end; takeover: claim to serving, as the survivor logged it.")
	for i, f := range res.Faults {
		b.P("fault %d: %s", i+1, f.line())
		var per []string
		for _, s := range f.Measured {
			if v, ok := f.FirstMs[s]; ok {
				per = append(per, fmt.Sprintf("%d:%.0f", s, v))
			} else {
				per = append(per, fmt.Sprintf("%d:none", s))
			}
		}
		b.P("  first money by SET (ms): %s", strings.Join(per, " "))
		for _, tk := range f.Took {
			b.P("  SET %d served by gateway %d at epoch %d (was %s) in %.1f ms", tk.Set, tk.Node, tk.Epoch, tk.Was, tk.Ms)
		}
		for _, s := range []string{f.Exit, f.Restart} {
			if s != "" {
				b.P("  %s", s)
			}
		}
		if len(f.Empty) > 0 {
			b.P("  empty SHAKEs to the probes by SET (its pool ran dry): %v", f.Empty)
		}
		for _, pr := range f.Problems {
			b.P("  PROBLEM: %s", pr)
		}
	}
	b.Client(res.Result, []string{"SHAKE", "OPEN", "SEND"}, func(*loadclient.RequestReport) string { return "" }, func(c *loadclient.Report) string {
		return fmt.Sprintf("errors %v; told %d fen (SHAKE %d, OPEN %d)", c.Errors, c.ShakeAmount+c.OpenAmount, c.ShakeAmount, c.OpenAmount)
	})
	told := res.Told() + res.Probes[0]
	b.P("\nmoney over the run (/cluster/stats got_amount + opened_amount): %d counted since the baseline; told %d (probes %d fen in %d answers): %s",
		res.Final-res.Baseline, told, res.Probes[0], res.Probes[1], harness.Verdict(told == res.Final-res.Baseline))
	b.P("the load client's history (history.csv), checked as Jepsen checks idempotence: %s: %s", res.History,
		harness.Verdict(res.History.OK() && res.History.Amount == res.Told()))
	b.Ledger(res.Result)
	b.P("\nJetStream audit: every message of the journal's stream read as it was appended (journal.csv), and each SET replayed at the end")
	b.P("from its newest snapshot as a claimant does; messages that are not the owner's rounds (another gateway's after a claim, or unfenced): %d: %s", res.Dropped, harness.Verdict(res.Dropped == 0))
	at := &harness.Table{Right: true, Head: []string{"SET", "owner", "epoch", "claims", "messages", "dropped", "replayed", "dropped"}}
	for _, a := range res.Audit {
		owner := a.Name
		if a.Owner < 0 {
			owner = "none" // released: every gateway hands its SETs back at its stop
		}
		at.Add(fmt.Sprint(a.Set), owner, fmt.Sprint(a.Epoch), fmt.Sprint(a.Claims), fmt.Sprint(a.Messages), fmt.Sprint(a.Dropped),
			fmt.Sprint(a.Replayed), fmt.Sprint(a.ReplayedDropped)+" "+a.Err)
	}
	b.WriteString(at.Text())
	for _, e := range res.Exits {
		b.P("%s", e)
	}
	return b
}
