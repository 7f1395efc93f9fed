package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"hongbao/jsjournal"
	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// result is summary.json.
type result struct {
	Command   string                `json:"command"`
	Load      string                `json:"load"`
	Faults    []*fault              `json:"faults"`
	Client    *loadclient.Report    `json:"client,omitempty"`
	ClientErr string                `json:"client_error,omitempty"`
	Probes    [2]int64              `json:"probes_told"` // fen, money answers
	Baseline  int64                 `json:"money_baseline"`
	Final     int64                 `json:"money_final"` // /cluster/stats got_amount + opened_amount at the end
	Cluster   harness.ClusterStats  `json:"cluster"`
	Checks    []harness.LedgerCheck `json:"cluster_checks"`
	Audit     []audit               `json:"audit"`
	Dropped   int                   `json:"dropped"` // messages after a claim not from its owner, every SET, seen live or replayed
	Exits     []string              `json:"exits"`
	Failures  []string              `json:"failures"`
}

// shakeCampaign is the shake campaign's rate and seconds: all dealt over
// the lead but its last 2 s, 2 envelopes for each SHAKE of the run (unless
// -shake-rate sets the rate). A campaign's part ends with its gateway, and
// the SETs that gateway ran keep only what it dealt them: the pools must
// hold the whole run's before the first fault.
func (c config) shakeCampaign() (rate, secs int) { return c.ShakeFill(c.load()) }

// plan is the faults in order.
func (c config) plan() []string {
	var p []string
	if c.kills > 0 {
		p = append(p, "kill")
	}
	if c.stop {
		p = append(p, "stop")
	}
	if c.nats {
		p = append(p, "nats")
	}
	for range c.kills - 1 {
		p = append(p, "kill")
	}
	return p
}

func run(ctx context.Context, cfg config, command string) error {
	r, err := harness.NewRun(cfg.Out, "demofailover-", "demofailover", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	defer r.WriteCommands()
	rate, secs := cfg.shakeCampaign()
	res := &result{Command: command, Load: fmt.Sprintf("%d users, %d SHAKE/s, %v SEND/s for %v after a %v ramp; shake campaign %d/s for %d s, send campaign %d/s",
		cfg.Users, cfg.QPS, cfg.SendRate, cfg.load(), cfg.Ramp, rate, secs, cfg.Camps.Send)}
	fail := func(format string, args ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, args...)) }
	r.Say("3 NATS servers (JetStream), %d gateways, %d SETs, -replicas %d, -lease %v, -standby=%v; %s; faults %s, %v apart; files in %s/",
		gateways, cfg.Sets, cfg.Replicas, cfg.Lease, cfg.standby, res.Load, strings.Join(cfg.plan(), ", "), cfg.Slot, r.Dir)

	// NATS: the gateways' users (their JetStream permissions) and the audit's.
	pass := make([]byte, 16)
	rand.Read(pass)
	auditor := harness.NATSUser{Name: "demofailover-audit", Password: hex.EncodeToString(pass)}
	ids, js, stopNATS, err := r.StartGatewaysNATS(ctx, cfg.NATSServer(), gateways,
		jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: cfg.Sets, Gateways: gateways, Replicas: cfg.Replicas}, auditor)
	if err != nil {
		return err
	}
	defer stopNATS()

	extra := []string{"-journal", "jetstream", "-replicas", strconv.Itoa(cfg.Replicas), "-lease", cfg.Lease.String(), "-standby=" + strconv.FormatBool(cfg.standby)}
	cl := &harness.Cluster{Bin: cfg.Server(), Sets: cfg.Sets, Extra: append(extra, strings.Fields(cfg.ServerFlags)...), Dir: r.Dir,
		Echo: os.Stderr, URL: js.URL(), Auth: harness.IdentityArgs(ids), SamePorts: true}
	defer cl.Cleanup()
	if err := cl.Start(ctx, gateways); err != nil {
		return err
	}
	nc, err := nats.Connect(js.URL(), nats.UserInfo(auditor.Name, auditor.Password), nats.Name(auditor.Name), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := startWatch(ctx, nc, cfg.Sets, r.Path("journal.csv"), time.Now())
	if err != nil {
		return err
	}
	pcsv, err := os.Create(r.Path("probes.csv"))
	if err != nil {
		return err
	}
	defer pcsv.Close()
	fmt.Fprintln(pcsv, "fault,set,t_s,login_s")
	x := &runner{cfg: cfg, r: r, cl: cl, js: js, ps: newProbes(cfg.Sets, cl.Addrs(), cfg.probeEvery), csv: pcsv}
	own, err := x.waitOwned(15 * time.Second)
	if err != nil {
		return err
	}
	for _, g := range cl.Gateways {
		r.Say("gateway %d pid %d serving %s, admin %s", g.Node, g.Srv.PID, g.Srv.Listen, g.Srv.Admin.URL)
		r.Step(fmt.Sprintf("gateway %d", g.Node), g.Srv.CommandLine())
	}
	r.Say("SET owners: %v", own)
	if res.Baseline, _, err = x.cl.Money(-1, 5*time.Second); err != nil {
		return err
	}

	total := cfg.Ramp + cfg.load()
	client, err := r.StartStepClient(ctx, cl, cfg.StepLoad, cfg.RunFlags, cfg.load(), "-reconcile", "at-least")
	if err != nil {
		return err
	}
	x.start = client.Start.Add(cfg.Ramp)
	x.campaigns(client.Start.Add(total-harness.CampaignMargin), fail)

	loadEnd := x.start.Add(cfg.load())
	for k, kind := range cfg.plan() {
		harness.Sleep(ctx, time.Until(x.start.Add(cfg.Lead+time.Duration(k)*cfg.Slot)))
		if ctx.Err() != nil || client.Exited() || time.Now().After(loadEnd.Add(-cfg.window)) {
			// Its window would outlast the load: the earlier faults overran their slots.
			why := fmt.Sprintf("the load ends in %.1fs", time.Until(loadEnd).Seconds())
			if client.Exited() {
				why = fmt.Sprintf("the load client exited (%v)", client.Wait())
			}
			if ctx.Err() != nil {
				why = ctx.Err().Error()
			}
			fail("fault %d (%s) and those after it not run: %s", k+1, kind, why)
			break
		}
		f := x.fault(ctx, k+1, kind)
		res.Faults = append(res.Faults, f)
		r.Say("fault %d at +%.1fs: %s", k+1, f.AtS, f.line())
		for _, p := range f.Problems {
			fail("fault %d (%s %s): %s", k+1, kind, f.Target, p)
		}
	}

	if err := client.Wait(); err != nil {
		res.ClientErr = err.Error()
		fail("loadclient: %v", err)
	}
	if res.Client, err = client.ReadReport(); err != nil {
		fail("%v", err)
	} else if !harness.Reconciled(res.Client) {
		fail("the load client's reconciliation (told ≤ counted, invariants) with /cluster/stats did not pass")
	}
	res.Probes[0], res.Probes[1] = x.ps.told()
	x.settle(res, fail)
	audits := w.list()
	if err := replay(ctx, nc, auditor.Name, jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: cfg.Sets, Gateways: gateways, Replicas: cfg.Replicas}, audits); err != nil {
		fail("replaying the journal: %v", err)
	}
	for _, g := range cl.Gateways {
		if g.Srv == nil {
			continue
		}
		t0 := time.Now()
		code, err := g.Srv.Stop(30 * time.Second)
		res.Exits = append(res.Exits, fmt.Sprintf("gateway %d: exit %d after SIGTERM in %v", g.Node, code, time.Since(t0).Round(time.Millisecond)))
		if err != nil {
			fail("gateway %d: %v", g.Node, err)
		}
		g.Srv = nil
	}
	live, err := w.end(ctx, 10*time.Second)
	if err != nil {
		fail("%v", err)
	}
	for i := range audits { // the watch's figures with the replay's
		live[i].Replayed, live[i].ReplayedDropped, live[i].Err = audits[i].Replayed, audits[i].ReplayedDropped, audits[i].Err
	}
	res.Audit = live
	var which string
	if res.Dropped, which = dropped(live); res.Dropped > 0 {
		fail("JetStream holds %d messages after a claim from a gateway other than the claimant (%s): answers a fenced gateway sent", res.Dropped, which)
	}
	writeReport(res, cfg, r)
	if len(res.Failures) > 0 {
		return errors.New(strings.Join(res.Failures, "; "))
	}
	r.Say("PASS")
	return nil
}

// campaigns starts the shake campaign (shakeCampaign) and the send
// campaign until end, both on gateway 2.
func (x *runner) campaigns(end time.Time, fail func(string, ...any)) {
	a, c := x.cl.Admin(2), x.cfg.Camps
	rate, fill := x.cfg.shakeCampaign()
	secs := max(1, int(time.Until(end).Seconds()))
	for _, p := range []struct {
		kind string
		q    url.Values
		secs int
	}{{"shake", harness.ShakeCampaign(rate, fill), fill}, {"send", harness.SendCampaign(c.Send, secs, c.Recipients), secs}} {
		cmp, err := a.StartCampaign(p.kind, p.q)
		x.r.Step(fmt.Sprintf("%s campaign for %d s", p.kind, p.secs), fmt.Sprintf("curl -sS -XPOST '%s/campaigns/%s?%s'", a.URL, p.kind, p.q.Encode()))
		if err != nil {
			fail("%s campaign: %v", p.kind, err)
			continue
		}
		x.r.Say("POST /campaigns/%s?%s on gateway 2 → campaign %d (%d s), dealt by parts", p.kind, p.q.Encode(), cmp.ID, p.secs)
	}
}

// settle checks the run's money once the cluster settled: told by the
// load client and the probes == counted since the baseline.
func (x *runner) settle(res *result, fail func(string, ...any)) {
	if err := x.cl.WaitRunning(10 * time.Second); err != nil {
		fail("at the end: %v", err)
	}
	told := res.Probes[0]
	if c := res.Client; c != nil {
		told += int64(c.ShakeAmount + c.OpenAmount)
	}
	res.Final, res.Cluster, res.Checks = x.cl.CheckMoney(res.Baseline, told, fail)
}
