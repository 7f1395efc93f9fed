package main

import (
	"fmt"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// line is a step in one line.
func (s *step) line() string {
	what := map[string]string{"restart": "gateway %d stopped (SIGTERM) and started again", "join": "gateway %d joins",
		"leave": "gateway %d leaves (SIGTERM)"}[s.Kind]
	return fmt.Sprintf(what+": %d SETs moved, pause max %.1f ms, median %.1f ms; money counted before %d (≥ told by then), after %d; %s: %s",
		s.Node, len(s.Moves), s.PauseMax, s.PauseMed, s.Before, s.After, s.Exit, harness.Verdict(len(s.Problems) == 0))
}

// writeReport prints the report and writes report.txt and summary.json.
func writeReport(res *result, cfg config, r *harness.Run) {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("\ndemorolling %s: 3 NATS servers, %d gateways (-node I/%d), %d SETs, -replicas %d, -rebalance %v",
		time.Now().UTC().Format(time.RFC3339), gateways, nodes, cfg.Sets, cfg.Replicas, cfg.rebalance)
	p("load: %s\n", res.Load)
	t := &harness.Table{Right: true, Head: []string{"#", "step", "at", "took", "SETs moved", "pause max", "median", "SHAKE p99", "vs lead", "refused", "counted before", "after", "verdict"}}
	for i, s := range res.Steps {
		what := fmt.Sprintf("%s gateway %d", s.Kind, s.Node)
		ratio := 0.0
		if res.LeadP99Ms > 0 {
			ratio = s.P99Ms / res.LeadP99Ms
		}
		t.Add(fmt.Sprint(i+1), what, fmt.Sprintf("+%.1fs", s.AtS), fmt.Sprintf("%.1fs", s.EndS-s.AtS), fmt.Sprint(len(s.Moves)),
			fmt.Sprintf("%.1f ms", s.PauseMax), fmt.Sprintf("%.1f ms", s.PauseMed), fmt.Sprintf("%.1f ms", s.P99Ms), fmt.Sprintf("%.2f×", ratio),
			fmt.Sprint(s.Refused), fmt.Sprint(s.Before), fmt.Sprint(s.After), harness.Verdict(len(s.Problems) == 0))
	}
	b.WriteString(t.Text())
	p("\npause: a SET's old owner refusing its requests to the new one serving, as the old owner logged it (\"SET moved\");")
	p("SHAKE p99: the worst second's in the step, against the lead's worst second (%.1f ms); refused: answers \"overloaded\" (retry) in the step.", res.LeadP99Ms)
	for i, s := range res.Steps {
		p("step %d: %s", i+1, s.line())
		for _, m := range s.Moves {
			p("  SET %d from gateway %d to %s: pause %.1f ms, prepared in %.1f ms", m.Set, m.From, m.To, m.PauseMs, m.PrepareMs)
		}
		for _, pr := range s.Problems {
			p("  PROBLEM: %s", pr)
		}
	}
	if c := res.Client; c != nil {
		p("\nload client: %d users, %d connects, %d redirected (LOGIN_ACK 3), %d outages (%d moved, ERROR 9), %d reconnects, longest outage %.2fs",
			c.Users, c.Connects, c.Redirected, c.Outages, c.Moved, c.Reconnects, c.OutageMaxS)
		for _, k := range []string{"SHAKE", "OPEN", "SEND", "CHAT"} {
			if q := c.Requests[k]; q != nil {
				p("  %-5s sent %d, answered %d, lost %d, moved (not carried out) %d, status %v; p50 %s, p99 %s, max %s", k, q.Sent, q.Answered, q.Lost, q.NotDone, q.Status,
					harness.Ms(q.Latency.P50), harness.Ms(q.Latency.P99), harness.Ms(q.Latency.Max))
			}
		}
		p("  told %d fen (SHAKE %d, OPEN %d); OPENs sent again %d, shares learned by them %d (%d fen)", c.ShakeAmount+c.OpenAmount, c.ShakeAmount, c.OpenAmount,
			c.OpenResent, c.OpenLearned, c.OpenLearnedAmount)
		if c.Reconcile != nil {
			p("  %s", c.Reconcile.Summary())
		}
	}
	if res.ClientErr != "" {
		p("load client: %s", res.ClientErr)
	}
	p("\nmoney over the run (/cluster/stats got_amount + opened_amount): %d counted since the baseline", res.Final-res.Baseline)
	p("cluster ledger at the end (%d gateways answered, missing %v):", res.Cluster.Gateways, res.Cluster.Missing)
	for _, c := range res.Checks {
		p("  %s", c)
	}
	if len(res.Failures) > 0 {
		p("\nFAILED:\n  %s", strings.Join(res.Failures, "\n  "))
	} else {
		res.Failures = []string{}
	}
	r.Report(b.String(), res, "gateway*.log, n*.log, loadclient.log, report.json, timeline.csv, commands.txt")
}
