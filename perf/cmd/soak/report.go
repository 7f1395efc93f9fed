package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// results are what soak prints at the end and report.md leads with: the
// slopes, the load and the reconciliation.
func (o *outcome) results() harness.Doc {
	c, r := o.cfg, o.report
	d := harness.Doc{harness.H2("Slopes"), harness.Para(fmt.Sprintf("Server figures over %[1]v at %[2]d SHAKE/s (%[3]d samples): least-squares slope per minute of each over the whole load (t = 0 … %[1]v) and over its second half (after the warm-up). "+
		"Verdict: *flat* when the second half's slope, kept up for an hour, moves the figure by less than %.0[4]f %% of its mean there.", c.duration, c.qps, len(o.samples), flatWithin*100)),
		trendTable(o.trends), harness.H2("Load")}
	if r == nil {
		return append(d, harness.Para("The load client wrote no report."))
	}
	sh, op, ms := r.Requests["SHAKE"], r.Requests["OPEN"], harness.Ms
	d = append(d, harness.Para(fmt.Sprintf("%d users, %d connects (%d churned: %.1f/s over ramp and load), at most %d up; SHAKE sent %d, answered %d (%.0f/s over the load), lost %d, unanswered %d; "+
		"SHAKE latency p50 %s, p99 %s, p99.9 %s, max %s; %d ENVELOPE pushes, OPEN answered %d of %d; errors: connect %d, reset %d, timeout %d, protocol %d, overload %d; skipped while reconnecting %d.",
		r.Users, r.Connects, r.Churned, float64(r.Churned)/(c.ramp+c.duration).Seconds(), r.ConnectionsMax, sh.Sent, sh.Answered, float64(sh.Answered)/c.duration.Seconds(), sh.Lost, sh.Unanswered,
		ms(sh.Latency.P50), ms(sh.Latency.P99), ms(sh.Latency.P999), ms(sh.Latency.Max), r.Pushes["ENVELOPE"], op.Answered, op.Sent,
		r.Errors["connect"], r.Errors["reset"], r.Errors["timeout"], r.Errors["protocol"], r.Errors["overload"], r.Skipped)), harness.H2("Reconciliation"))
	if r.Reconcile == nil {
		d = append(d, harness.Para("None: the load client did not reconcile."))
	} else {
		t := &harness.Table{Right: true, Head: []string{"figure", "client", "against", "server", "diff"}}
		for _, c := range r.Reconcile.Checks {
			t.Add(c.Figure, fmt.Sprint(c.Got), c.Note, fmt.Sprint(c.Want), fmt.Sprintf("%+d", c.Diff))
		}
		d = append(d, harness.Para("The load client against GET /stats: "+r.Reconcile.Summary()), t)
		var lost uint64
		for _, rr := range r.Requests {
			lost += rr.Lost
		}
		if lost > 0 {
			d = append(d, harness.Para(fmt.Sprintf("The load client dropped connections with %d requests in flight (%d timeouts, %d resets). Answers the server wrote to them are in its ledger but were never read, so the money cannot reconcile exactly; see loadclient.log.",
				lost, r.Errors["timeout"], r.Errors["reset"])))
		}
	}
	ledger := &harness.Table{Right: true, Head: []string{"ledger", "left", "right", ""}}
	for _, c := range o.checks {
		ledger.Add(c.Name, fmt.Sprint(c.Left), fmt.Sprint(c.Right), map[bool]string{true: "ok", false: "MISMATCH"}[c.OK()])
	}
	d = append(d, ledger)
	if st := o.stats; st != nil {
		d = append(d, harness.Para(fmt.Sprintf("Shake: %d requests, %d got (%d fen), %d empty, %d overloaded; group envelopes: %d created, %d shares opened (%d fen), %d skipped.",
			st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.Empty, st.Shake.Overload, st.Envelopes.Created, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.SystemSkipped)))
	}
	return append(d, harness.Para(fmt.Sprintf("Server: SIGTERM → exit status %d in %v.", o.serverCode, o.stopped.Round(time.Millisecond))))
}

// doc is report.md: the run, its results, every sample and the commands.
func (o *outcome) doc() harness.Doc {
	c := o.cfg
	about := fmt.Sprintf("%d users, %d SHAKE/s for %v after a %v ramp at 0, churn %g reconnects/s, shake campaign %d/s, send campaign %d/s × %d recipients, server flags %q; server pid %d sampled every %v",
		c.users, c.qps, c.duration, c.ramp, c.churn, c.camps.Shake, c.camps.Send, c.camps.Recipients, strings.Join(o.serverArgs, " "), o.serverPID, c.interval)
	if c.gc {
		about += " (each heap reading after a forced collection: live heap)"
	}
	d := harness.Doc{harness.H1("Soak " + strings.TrimPrefix(filepath.Base(o.run.Dir), "soak-")),
		harness.Para(about + ". Server and load client share this machine's cores with whatever else runs on it.")}
	if o.interrupt {
		d = append(d, harness.Para("**Interrupted before the end: the figures cover part of the run.**"))
	}
	t := &harness.Table{Right: true, Head: append([]string{"t (from the load's start)"}, columns()...)}
	for i := range o.samples {
		var prev *harness.Sample
		if i > 0 {
			prev = &o.samples[i-1]
		}
		t.Add(append([]string{harness.When(o.samples[i].At, o.loadStart)}, row(&o.samples[i], prev)...)...)
	}
	return append(append(d, o.results()...), harness.H2("Samples"), t,
		harness.Para("Files: samples.csv (every sample), commands.txt (every step as a command), server.log, loadclient.log, report.json and timeline.csv (the load client's), stats.json, campaigns.json."))
}
