package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// demoReport is the text of report.txt.
func demoReport(r *demoResult, cfg config) string {
	var txt strings.Builder
	fmt.Fprintf(&txt, "\ndemocluster %s: %d gateways, %d SETs, %d users, %d SHAKE/s for %s\n\n", time.Now().UTC().Format(time.RFC3339), len(r.Gateways), cfg.sets, r.Users, r.QPS, r.Duration)
	t := &harness.Table{Right: true, Head: []string{"gateway", "logins", "SHAKEs", "got fen", "shake created fen", "envelopes", "opened fen",
		"events sent", "events received", "crossings timed out", "late", "goroutines"}}
	row := func(name string, st *harness.Stats, x *harness.Crossings) {
		t.Add(name, fmt.Sprint(st.Logins), fmt.Sprint(st.Shake.Requests), fmt.Sprint(st.Shake.GotAmount), fmt.Sprint(st.Shake.CreatedAmount),
			fmt.Sprint(st.Envelopes.Created), fmt.Sprint(st.Envelopes.OpenedAmount),
			fmt.Sprintf("%.0f", x.Sent), fmt.Sprintf("%.0f", x.Received), fmt.Sprintf("%.0f", x.TimedOut), fmt.Sprintf("%.0f", x.Late), fmt.Sprintf("%.0f", x.Goroutines))
	}
	var sum harness.Crossings
	for i := range r.Gateways {
		g := &r.Gateways[i]
		row(fmt.Sprint(g.Node), &g.Stats, &g.Crossings)
		sum.Sent += g.Crossings.Sent
		sum.Received += g.Crossings.Received
		sum.TimedOut += g.Crossings.TimedOut
		sum.Late += g.Crossings.Late
		sum.Goroutines += g.Crossings.Goroutines
	}
	row("cluster", &r.Cluster.Stats, &sum)
	txt.WriteString(t.Text())
	fmt.Fprintf(&txt, "\n/cluster/stats from gateway 0: %d gateways answered, missing %v\n", r.Cluster.Gateways, r.Cluster.Missing)
	for _, g := range r.Gateways {
		fmt.Fprintf(&txt, "gateway %d (pid %d, %s): %s\n", g.Node, g.PID, g.Listen, g.Exit)
		for _, c := range g.Checks {
			fmt.Fprintf(&txt, "  %s\n", c)
		}
	}
	fmt.Fprintln(&txt, "cluster (sums of /cluster/stats, campaigns' parts summed over the gateways):")
	for _, c := range r.Checks {
		fmt.Fprintf(&txt, "  %s\n", c)
	}
	if c := r.Client; c != nil {
		fmt.Fprintf(&txt, "\nload client: %d users, %d redirected (LOGIN_ACK 3), %d connects, max %d logged in\n", c.Users, c.Redirected, c.Connects, c.ConnectionsMax)
		for _, k := range []string{"SHAKE", "OPEN", "SEND", "CHAT"} {
			if q := c.Requests[k]; q != nil {
				fmt.Fprintf(&txt, "  %-5s sent %d, answered %d, status %v; %s\n", k, q.Sent, q.Answered, q.Status, latencyLine(q.Latency))
			}
		}
		fmt.Fprintf(&txt, "  pushes %v; CHAT_DELIVER p99 %s; errors %v\n", c.Pushes, harness.Ms(c.DeliverLatency.P99), c.Errors)
		if c.Reconcile != nil {
			fmt.Fprintf(&txt, "  %s\n", c.Reconcile.Summary())
		}
	}
	if r.ClientErr != "" {
		fmt.Fprintf(&txt, "load client: %s\n", r.ClientErr)
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(&txt, "\nFAILED:\n  %s\n", strings.Join(r.Failures, "\n  "))
	}
	return txt.String()
}

// latencyLine is a loadclient latency as p50/p99/p99.9/max.
func latencyLine(l loadclient.LatencyReport) string {
	return fmt.Sprintf("p50 %s, p99 %s, p99.9 %s, max %s (%d)", harness.Ms(l.P50), harness.Ms(l.P99), harness.Ms(l.P999), harness.Ms(l.Max), l.Count)
}

// report writes the report as report.html too, then as Run.Report does.
func report(r *harness.Run, title, txt string, summary any, files string) {
	os.WriteFile(r.Path("report.html"), []byte(harness.TextPage(title, txt)), 0o644)
	r.Report(txt, summary, "report.html, "+files)
}
