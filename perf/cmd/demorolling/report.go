package main

import (
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// line is a step in one line.
func (s *step) line() string {
	what := map[string]string{"restart": "gateway %d stopped (SIGTERM) and started again", "join": "gateway %d joins",
		"leave": "gateway %d leaves (SIGTERM)"}[s.Kind]
	return fmt.Sprintf(what+": %d SETs moved, pause max %.1f ms, median %.1f ms; money counted before %d (≥ told by then), after %d; %s: %s",
		s.Node, len(s.Moves), s.PauseMax, s.PauseMed, s.Before, s.After, s.Exit, harness.Verdict(len(s.Problems) == 0))
}

// report is the report: the steps, the load client, the money and the
// ledger.
func report(res *result, cfg config) *steprun.Text {
	b := &steprun.Text{}
	b.P("\ndemorolling %s: 3 NATS servers, %d gateways (-node I/%d), %d SETs, -replicas %d, -rebalance %v",
		time.Now().UTC().Format(time.RFC3339), gateways, nodes, cfg.Sets, cfg.Replicas, cfg.rebalance)
	b.P("load: %s\n", res.Load)
	t := &harness.Table{Right: true, Head: []string{"#", "step", "at", "took", "SETs moved", "pause max", "median", "SHAKE p99", "vs lead", "refused", "counted before", "after", "verdict"}}
	for i, s := range res.Steps {
		ratio := 0.0
		if res.LeadP99Ms > 0 {
			ratio = s.P99Ms / res.LeadP99Ms
		}
		t.Add(fmt.Sprint(i+1), fmt.Sprintf("%s gateway %d", s.Kind, s.Node), fmt.Sprintf("+%.1fs", s.AtS), fmt.Sprintf("%.1fs", s.EndS-s.AtS), fmt.Sprint(len(s.Moves)),
			fmt.Sprintf("%.1f ms", s.PauseMax), fmt.Sprintf("%.1f ms", s.PauseMed), fmt.Sprintf("%.1f ms", s.P99Ms), fmt.Sprintf("%.2f×", ratio),
			fmt.Sprint(s.Refused), fmt.Sprint(s.Before), fmt.Sprint(s.After), harness.Verdict(len(s.Problems) == 0))
	}
	b.WriteString(t.Text())
	b.P("\npause: a SET's old owner refusing its requests to the new one serving, as the old owner logged it (\"SET moved\");")
	b.P("SHAKE p99: the worst second's in the step, against the lead's worst second (%.1f ms); refused: answers \"overloaded\" (retry) in the step.", res.LeadP99Ms)
	for i, s := range res.Steps {
		b.P("step %d: %s", i+1, s.line())
		for _, m := range s.Moves {
			b.P("  SET %d from gateway %d to %s: pause %.1f ms, prepared in %.1f ms", m.Set, m.From, m.To, m.PauseMs, m.PrepareMs)
		}
		for _, pr := range s.Problems {
			b.P("  PROBLEM: %s", pr)
		}
	}
	b.Client(res.Result, []string{"SHAKE", "OPEN", "SEND", "CHAT"}, func(q *loadclient.RequestReport) string {
		return fmt.Sprintf("moved (not carried out) %d, ", q.NotDone)
	}, func(c *loadclient.Report) string {
		return fmt.Sprintf("told %d fen (SHAKE %d, OPEN %d); OPENs sent again %d, shares learned by them %d (%d fen)", c.ShakeAmount+c.OpenAmount, c.ShakeAmount, c.OpenAmount,
			c.OpenResent, c.OpenLearned, c.OpenLearnedAmount)
	})
	b.P("\nmoney over the run (/cluster/stats got_amount + opened_amount): %d counted since the baseline", res.Final-res.Baseline)
	b.Ledger(res.Result)
	return b
}
