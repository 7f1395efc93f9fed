// Package steprun is what demofailover and demorolling share: gateways
// over three NATS servers with JetStream under the load client, steps (a
// fault, an upgrade) one -slot apart, the money checked at the end, and the
// report's common blocks.
package steprun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// Main is main of a tool whose run lasts at most ramp + load(c), bounded
// 4 minutes after that; run gets the command line, printed first.
func Main[C any](name string, parse func(*flag.FlagSet, []string) (C, error), load func(C) time.Duration, run func(context.Context, C, string) error) {
	harness.Main(name, parse, func(c C) time.Duration { return load(c) + 4*time.Minute }, func(ctx context.Context, c C) error {
		command := name + " " + strings.Join(os.Args[1:], " ")
		fmt.Println(command)
		return run(ctx, c, command)
	})
}

// Result is summary.json's common part.
type Result struct {
	Command   string                `json:"command"`
	Load      string                `json:"load"`
	Client    *loadclient.Report    `json:"client,omitempty"`
	ClientErr string                `json:"client_error,omitempty"`
	Baseline  int64                 `json:"money_baseline"`
	Final     int64                 `json:"money_final"` // /cluster/stats got_amount + opened_amount at the end
	Cluster   harness.ClusterStats  `json:"cluster"`
	Checks    []harness.LedgerCheck `json:"cluster_checks"`
	Exits     []string              `json:"exits"`
	Failures  []string              `json:"failures"`
}

// Fail records a failure.
func (r *Result) Fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Run is one run: its files, its result, the cluster and the load client.
type Run struct {
	*harness.Run
	Res       *Result
	Cfg       harness.StepLoad
	Load      time.Duration // after the ramp
	Layout    jsjournal.Layout
	Cl        *harness.Cluster
	JS        *harness.NATSServers
	Client    *harness.Client
	LoadStart time.Time // the ramp's end
	stopNATS  func()
}

// New creates the run's directory and says what it runs: header, then the
// load.
func New(name, command string, c harness.StepLoad, rf harness.RunFlags, load time.Duration, header string) (*Run, error) {
	hr, err := harness.NewRun(rf.Out, name+"-", name, os.Stdout, os.Stderr)
	if err != nil {
		return nil, err
	}
	rate, secs := c.ShakeFill(load)
	r := &Run{Run: hr, Cfg: c, Load: load, Res: &Result{Command: command,
		Load: fmt.Sprintf("%d users, %d SHAKE/s, %v SEND/s for %v after a %v ramp; shake campaign %d/s for %d s, send campaign %d/s",
			c.Users, c.QPS, c.SendRate, load, c.Ramp, rate, secs, c.Camps.Send)}}
	r.Say("3 NATS servers (JetStream), %s; %s; files in %s/", header, r.Res.Load, r.Dir)
	return r, nil
}

// StartCluster starts the NATS servers (users for nodes gateways, and
// more) and 3 gateways of -journal jetstream with extra flags.
func (r *Run) StartCluster(ctx context.Context, rf harness.RunFlags, nodes int, extra []string, more ...harness.NATSUser) error {
	c := r.Cfg
	r.Layout = jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: c.Sets, Gateways: nodes, Replicas: c.Replicas}
	ids, js, stop, err := r.StartGatewaysNATS(ctx, rf.NATSServer(), 3, r.Layout, more...)
	if err != nil {
		return err
	}
	r.JS, r.stopNATS = js, stop
	extra = append([]string{"-journal", "jetstream", "-replicas", strconv.Itoa(c.Replicas), "-lease", c.Lease.String()}, extra...)
	r.Cl = &harness.Cluster{Bin: rf.Server(), Sets: c.Sets, Nodes: nodes, Extra: append(extra, strings.Fields(rf.ServerFlags)...), Dir: r.Dir,
		Echo: os.Stderr, URL: js.URL(), Auth: harness.IdentityArgs(ids), SamePorts: true}
	return r.Cl.Start(ctx, 3)
}

// Close stops what the run started and writes commands.txt.
func (r *Run) Close() {
	if r.Cl != nil {
		r.Cl.Cleanup()
	}
	if r.stopNATS != nil {
		r.stopNATS()
	}
	r.WriteCommands()
}

// StartLoad lists the gateways, reads the baseline money, starts the load
// client (with its -reconcile flags) and the campaigns on gateway 2: the
// shake campaign fills the pools within the lead, the send one lasts
// sendSecs.
func (r *Run) StartLoad(ctx context.Context, rf harness.RunFlags, sendSecs func(start time.Time) int, reconcile ...string) error {
	for _, g := range r.Cl.Gateways {
		r.Say("gateway %d pid %d serving %s, admin %s", g.Node, g.Srv.PID, g.Srv.Listen, g.Srv.Admin.URL)
		r.Step(fmt.Sprintf("gateway %d", g.Node), g.Srv.CommandLine())
	}
	var err error
	if r.Res.Baseline, _, err = r.Cl.Money(-1, 5*time.Second); err != nil {
		return err
	}
	if r.Client, err = r.StartStepClient(ctx, r.Cl, r.Cfg, rf, r.Load, reconcile...); err != nil {
		return err
	}
	r.LoadStart = r.Client.Start.Add(r.Cfg.Ramp)
	a, c := r.Cl.Admin(2), r.Cfg.Camps
	rate, fill := r.Cfg.ShakeFill(r.Load)
	secs := sendSecs(r.Client.Start)
	for _, p := range []struct {
		kind string
		q    url.Values
		secs int
	}{{"shake", harness.ShakeCampaign(rate, fill), fill}, {"send", harness.SendCampaign(c.Send, secs, c.Recipients), secs}} {
		cmp, err := a.StartCampaign(p.kind, p.q)
		r.Step(fmt.Sprintf("%s campaign for %d s", p.kind, p.secs), fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, p.kind, p.q.Encode()))
		if err != nil {
			r.Res.Fail("%s campaign: %v", p.kind, err)
			continue
		}
		r.Say("POST /campaigns/%s?%s on gateway 2 → campaign %d (%d s), dealt by the SETs' shares", p.kind, p.q.Encode(), cmp.ID, p.secs)
	}
	return nil
}

// Steps runs step k (from 1) of kinds at the lead + (k-1) slots, until one
// would start within late of the load's end (late > 0), the context ends or
// the load client exits. A step returns its label, its line and problems.
func (r *Run) Steps(ctx context.Context, noun string, kinds []string, late time.Duration, step func(k int, kind string) (label, line string, problems []string)) {
	loadEnd := r.LoadStart.Add(r.Load)
	for i, kind := range kinds {
		harness.Sleep(ctx, time.Until(r.LoadStart.Add(r.Cfg.Lead+time.Duration(i)*r.Cfg.Slot)))
		if ctx.Err() != nil || r.Client.Exited() || late > 0 && time.Now().After(loadEnd.Add(-late)) {
			why := fmt.Sprintf("the load ends in %.1fs", time.Until(loadEnd).Seconds())
			if r.Client.Exited() {
				why = fmt.Sprintf("the load client exited (%v)", r.Client.Wait())
			}
			if ctx.Err() != nil {
				why = ctx.Err().Error()
			}
			r.Res.Fail("%s %d (%s) and those after it not run: %s", noun, i+1, kind, why)
			return
		}
		label, line, problems := step(i+1, kind)
		r.Say("%s %d: %s", noun, i+1, line)
		for _, p := range problems {
			r.Res.Fail("%s %d (%s): %s", noun, i+1, label, p)
		}
	}
}

// EndLoad waits for the load client and reads its report: its
// reconciliation (what, at-least or strict) must pass.
func (r *Run) EndLoad(what string) {
	var err error
	if err = r.Client.Wait(); err != nil {
		r.Res.ClientErr = err.Error()
		r.Res.Fail("loadclient: %v", err)
	}
	if r.Res.Client, err = r.Client.ReadReport(); err != nil {
		r.Res.Fail("%v", err)
	} else if !harness.Reconciled(r.Res.Client) {
		r.Res.Fail("the load client's %s reconciliation with /cluster/stats did not pass", what)
	}
}

// Told is the money the load client was told.
func (r *Result) Told() int64 {
	if c := r.Client; c != nil {
		return int64(c.ShakeAmount + c.OpenAmount)
	}
	return 0
}

// CheckCampaigns waits up to wait for every campaign to be dealt to
// exactly its total, summed over the gateways (each SET's share dealt by
// whichever gateway ran the SET, through the faults), and fails the run
// otherwise.
func (r *Run) CheckCampaigns(wait time.Duration) {
	var sum []harness.Campaign
	err := harness.Poll(wait, 200*time.Millisecond, func() error {
		var lists [][]harness.Campaign
		for _, g := range r.Cl.Gateways {
			if g.Srv == nil {
				continue
			}
			l, _, err := g.Srv.Admin.Campaigns()
			if err != nil {
				return err
			}
			lists = append(lists, l)
		}
		if sum = harness.ClusterCampaigns(lists...); len(sum) == 0 || !harness.Exact(sum, len(sum)) {
			return errors.New("not at their totals")
		}
		return nil
	})
	if err != nil {
		r.Res.Fail("campaigns not at exactly their totals %v after the load: %s (%v)", wait, harness.CampaignLine(sum), err)
		return
	}
	r.Say("campaigns, summed over the gateways: %s", harness.CampaignLine(sum))
}

// Settle checks the money once the cluster settled (told by the clients ==
// counted since the baseline) and the ledger.
func (r *Run) Settle(told int64) {
	r.Res.Final, r.Res.Cluster, r.Res.Checks = r.Cl.CheckMoney(r.Res.Baseline, told, r.Res.Fail)
}

// StopGateways stops every running gateway with SIGTERM: each must exit 0.
func (r *Run) StopGateways(timeout time.Duration) {
	for _, g := range r.Cl.Gateways {
		if g.Srv == nil {
			continue
		}
		t0 := time.Now()
		code, err := g.Srv.Stop(timeout)
		r.Res.Exits = append(r.Res.Exits, fmt.Sprintf("gateway %d: exit %d after SIGTERM in %v", g.Node, code, time.Since(t0).Round(time.Millisecond)))
		if err != nil {
			r.Res.Fail("gateway %d: %v", g.Node, err)
		}
		g.Srv = nil
	}
}

// Text is a report being written.
type Text struct{ strings.Builder }

// P writes a line.
func (b *Text) P(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }

// Client writes the load client's figures: its connections, per kind of
// request more(q) after sent, answered and lost, then told(c).
func (b *Text) Client(res *Result, kinds []string, more func(q *loadclient.RequestReport) string, told func(c *loadclient.Report) string) {
	if c := res.Client; c != nil {
		b.P("\nload client: %d users, %d connects, %d redirected (LOGIN_ACK 3), %d outages (%d moved, ERROR 9), %d reconnects, longest outage %.2fs",
			c.Users, c.Connects, c.Redirected, c.Outages, c.Moved, c.Reconnects, c.OutageMaxS)
		for _, k := range kinds {
			if q := c.Requests[k]; q != nil {
				b.P("  %-5s sent %d, answered %d, lost %d, %sstatus %v; p50 %s, p99 %s, max %s", k, q.Sent, q.Answered, q.Lost, more(q), q.Status,
					harness.Ms(q.Latency.P50), harness.Ms(q.Latency.P99), harness.Ms(q.Latency.Max))
			}
		}
		b.P("  %s", told(c))
		if c.Reconcile != nil {
			b.P("  %s", c.Reconcile.Summary())
		}
	}
	if res.ClientErr != "" {
		b.P("load client: %s", res.ClientErr)
	}
}

// Ledger writes the cluster's ledger at the end.
func (b *Text) Ledger(res *Result) {
	b.P("cluster ledger at the end (%d gateways answered, missing %v):", res.Cluster.Gateways, res.Cluster.Missing)
	for _, c := range res.Checks {
		b.P("  %s", c)
	}
}

// Finish writes the failures, prints the report, writes report.txt and
// summary.json, and gives the verdict.
func (r *Run) Finish(b *Text, summary any, files string) error {
	if len(r.Res.Failures) > 0 {
		b.P("\nFAILED:\n  %s", strings.Join(r.Res.Failures, "\n  "))
	} else {
		r.Res.Failures = []string{}
	}
	r.Report(b.String(), summary, files)
	if len(r.Res.Failures) > 0 {
		return errors.New(strings.Join(r.Res.Failures, "; "))
	}
	r.Say("PASS")
	return nil
}
