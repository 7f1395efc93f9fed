package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// writeDemoReport prints the report and writes report.txt, report.html and
// summary.json.
func writeDemoReport(r *demoResult, cfg config, stdout io.Writer, path func(string) string) {
	var txt bytes.Buffer
	w := tabwriter.NewWriter(&txt, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&txt, "\ndemocluster %s: %d gateways, %d SETs, %d users, %d SHAKE/s for %s\n\n", r.Date, len(r.Gateways), cfg.sets, r.Users, r.QPS, r.Duration)
	fmt.Fprintln(w, "gateway\tlogins\tSHAKEs\tgot fen\tshake created fen\tenvelopes\topened fen\tevents sent\tevents received\tcrossings timed out\tlate\tgoroutines\t")
	row := func(name string, st *harness.Stats, x *crossingMetrics) {
		sent, recv, to, late, gor := "", "", "", "", ""
		if x != nil {
			sent, recv, to, late, gor = fmtF(x.Sent), fmtF(x.Received), fmtF(x.TimedOut), fmtF(x.Late), fmtF(x.Goroutines)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, st.Logins, st.Shake.Requests, st.Shake.GotAmount,
			st.Shake.CreatedAmount, st.Envelopes.Created, st.Envelopes.OpenedAmount, sent, recv, to, late, gor)
	}
	var sum crossingMetrics
	for i := range r.Gateways {
		g := &r.Gateways[i]
		row(fmt.Sprintf("%d", g.Node), &g.Stats, &g.Crossings)
		sum.Sent += g.Crossings.Sent
		sum.Received += g.Crossings.Received
		sum.TimedOut += g.Crossings.TimedOut
		sum.Late += g.Crossings.Late
		sum.Goroutines += g.Crossings.Goroutines
	}
	row("cluster", &r.Cluster.Stats, &sum)
	w.Flush()
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
		fmt.Fprintf(&txt, "  pushes %v; CHAT_DELIVER p99 %s; errors %v\n", c.Pushes, ms(c.DeliverLatency.P99), c.Errors)
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
	stdout.Write(txt.Bytes())
	os.WriteFile(path("report.txt"), txt.Bytes(), 0o644)
	if b, err := json.MarshalIndent(r, "", "  "); err == nil {
		os.WriteFile(path("summary.json"), b, 0o644)
	}
	os.WriteFile(path("report.html"), []byte(htmlPage("democluster "+r.Date, txt.String())), 0o644)
}

func fmtF(v float64) string { return fmt.Sprintf("%.0f", v) }

// ms formats ns as milliseconds.
func ms(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }

// htmlPage wraps a text report in a page of its own.
func htmlPage(title, text string) string {
	return "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + html.EscapeString(title) +
		"</title><style>body{font-family:sans-serif;margin:2em}pre{font-size:13px;background:#f6f6f6;padding:1em}</style></head><body><h1>" +
		html.EscapeString(title) + "</h1><pre>" + html.EscapeString(text) + "</pre></body></html>\n"
}

// latencyLine is a loadclient latency as p50/p99/p99.9/max.
func latencyLine(l loadclient.LatencyReport) string {
	return fmt.Sprintf("p50 %s, p99 %s, p99.9 %s, max %s (%d)", ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max), l.Count)
}
