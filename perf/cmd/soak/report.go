package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// summary is what soak prints at the end: the slopes, the load and the
// reconciliation.
func (o *outcome) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Server figures over %v at %d SHAKE/s (%d samples; slopes by least squares, per minute):\n\n", o.cfg.duration, o.cfg.qps, len(o.samples))
	b.WriteString(trendTable(o.trends))
	b.WriteString("\n")
	b.WriteString(o.loadText())
	b.WriteString(o.reconcileText())
	return b.String()
}

// loadText says what the load client did.
func (o *outcome) loadText() string {
	r := o.report
	if r == nil {
		return "The load client wrote no report.\n"
	}
	var b strings.Builder
	sh := r.Requests["SHAKE"]
	op := r.Requests["OPEN"]
	fmt.Fprintf(&b, "Load: %d users, %d connects (%d churned: %.1f/s over ramp and load), at most %d up; SHAKE sent %d, answered %d (%.0f/s over the load), lost %d, unanswered %d;\n",
		r.Users, r.Connects, r.Churned, float64(r.Churned)/(o.cfg.ramp+o.cfg.duration).Seconds(), r.ConnectionsMax, sh.Sent, sh.Answered,
		float64(sh.Answered)/o.cfg.duration.Seconds(), sh.Lost, sh.Unanswered)
	fmt.Fprintf(&b, "SHAKE latency p50 %s, p99 %s, p99.9 %s, max %s; %d ENVELOPE pushes, OPEN answered %d of %d;\n",
		harness.Ms(sh.Latency.P50), harness.Ms(sh.Latency.P99), harness.Ms(sh.Latency.P999), harness.Ms(sh.Latency.Max), r.Pushes["ENVELOPE"], op.Answered, op.Sent)
	fmt.Fprintf(&b, "errors: connect %d, reset %d, timeout %d, protocol %d, overload %d; skipped while reconnecting %d.\n",
		r.Errors["connect"], r.Errors["reset"], r.Errors["timeout"], r.Errors["protocol"], r.Errors["overload"], r.Skipped)
	return b.String()
}

// reconcileText gives the reconciliation, the ledger checks and the exit.
func (o *outcome) reconcileText() string {
	var b strings.Builder
	if r := o.report; r != nil && r.Reconcile != nil {
		fmt.Fprintf(&b, "\nReconciliation (the load client against GET /stats): %s\n", r.Reconcile.Summary())
		for _, c := range r.Reconcile.Checks {
			fmt.Fprintf(&b, "  %-28s client %14d  %-16s %14d  diff %+d\n", c.Figure, c.Got, c.Note, c.Want, c.Diff)
		}
		var lost uint64
		for _, rr := range r.Requests {
			lost += rr.Lost
		}
		if lost > 0 {
			fmt.Fprintf(&b, "  (the load client dropped connections with %d requests in flight: %d timeouts, %d resets. Answers the server\n"+
				"  wrote to them are in its ledger but were never read, so the money cannot reconcile exactly; see loadclient.log)\n",
				lost, r.Errors["timeout"], r.Errors["reset"])
		}
	} else {
		b.WriteString("\nReconciliation: none (no report from the load client)\n")
	}
	b.WriteString("Ledger:\n")
	harness.WriteChecks(&b, o.checks, 14)
	if st := o.stats; st != nil {
		fmt.Fprintf(&b, "  shake: %d requests, %d got (%d fen), %d empty, %d overloaded; group envelopes: %d created, %d shares opened (%d fen), %d skipped\n",
			st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.Empty, st.Shake.Overload,
			st.Envelopes.Created, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.SystemSkipped)
	}
	fmt.Fprintf(&b, "Server: SIGTERM → exit status %d in %v.\n", o.serverCode, o.stopped.Round(time.Millisecond))
	return b.String()
}

// markdown is report.md.
func (o *outcome) markdown() string {
	c := o.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak %s\n\n", strings.TrimPrefix(filepath.Base(o.run.Dir), "soak-"))
	fmt.Fprintf(&b, "%d users, %d SHAKE/s for %v after a %v ramp at 0, churn %g reconnects/s, shake campaign %d/s, send campaign %d/s × %d recipients, server flags %q; server pid %d sampled every %v",
		c.users, c.qps, c.duration, c.ramp, c.churn, c.camps.Shake, c.camps.Send, c.camps.Recipients, strings.Join(o.serverArgs, " "), o.serverPID, c.interval)
	if c.gc {
		b.WriteString(" (each heap reading after a forced collection: live heap)")
	}
	b.WriteString(". Server and load client share this machine's cores with whatever else runs on it.\n\n")
	if o.interrupt {
		b.WriteString("**Interrupted before the end: the figures cover part of the run.**\n\n")
	}
	b.WriteString("## Slopes\n\n")
	fmt.Fprintf(&b, "Least-squares slope per minute of each figure over the samples of the whole load (t = 0 … %v) and of its second half (after the warm-up). ", c.duration)
	fmt.Fprintf(&b, "Verdict: *flat* when the second half's slope, kept up for an hour, moves the figure by less than %.0f %% of its mean there.\n\n", flatWithin*100)
	b.WriteString(trendTable(o.trends))
	b.WriteString("\n## Load\n\n")
	b.WriteString(o.loadText())
	b.WriteString("\n## Reconciliation\n\n```\n")
	b.WriteString(strings.TrimPrefix(o.reconcileText(), "\n"))
	b.WriteString("```\n\n## Samples\n\n")
	b.WriteString("| t (m:ss from the load's start) | RSS MiB | heap MiB | stacks MiB | goroutines | fds | threads | connections | SHAKE/s | server CPU % |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for i := range o.samples {
		s := &o.samples[i]
		rate, cpu := "", ""
		if i > 0 {
			if r, c, ok := rates(&o.samples[i-1], s); ok {
				rate, cpu = fmt.Sprintf("%.0f", r), fmt.Sprintf("%.0f", c)
			}
		}
		if s.Err != nil {
			rate += " (error: " + s.Err.Error() + ")"
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.2f | %.0f | %d | %.0f | %.0f | %s | %s |\n", since(s.At, o.loadStart),
			float64(s.RSS)/(1<<20), s.Metric("go_memstats_heap_inuse_bytes")/(1<<20), s.Metric("go_memstats_stack_inuse_bytes")/(1<<20),
			s.Metric("go_goroutines"), s.FDs, s.Metric("go_threads"), s.Metric("hongbao_connections"), rate, cpu)
	}
	b.WriteString("\n## Commands\n\n```sh\n")
	steps, _ := o.run.Steps.All()
	for _, s := range steps {
		fmt.Fprintf(&b, "# %s\n%s\n", s.What, s.Cmd)
	}
	b.WriteString("```\n\nFiles: samples.csv (every sample), commands.txt, server.log, loadclient.log, report.json and timeline.csv (the load client's), stats.json, campaigns.json.\n")
	return b.String()
}
