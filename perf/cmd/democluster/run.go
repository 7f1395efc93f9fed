package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// gatewayResult is one gateway after the run.
type gatewayResult struct {
	Node      int                   `json:"node"`
	PID       int                   `json:"pid"`
	Listen    string                `json:"listen"`
	Admin     string                `json:"admin"`
	Stats     harness.Stats         `json:"stats"`
	Campaigns []harness.Campaign    `json:"campaigns"`
	Crossings harness.Crossings     `json:"crossings"`
	Checks    []harness.LedgerCheck `json:"checks"`
	Exit      string                `json:"exit"`
}

// demoResult is summary.json.
type demoResult struct {
	Command   string                `json:"command"`
	Users     int                   `json:"users"`
	QPS       int                   `json:"qps"`
	Duration  string                `json:"duration"`
	Gateways  []gatewayResult       `json:"gateways"`
	Cluster   harness.ClusterStats  `json:"cluster"`
	Checks    []harness.LedgerCheck `json:"cluster_checks"`
	Client    *loadclient.Report    `json:"client,omitempty"`
	ClientErr string                `json:"client_error,omitempty"`
	Failures  []string              `json:"failures"`
}

func runDemo(ctx context.Context, cfg config, r *harness.Run) error {
	defer r.WriteCommands()
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	r.Say("%d gateways, %d SETs, %d users, %d SHAKE/s for %v after a %v ramp; SEND %v/s, CHAT %v/s; files in %s/",
		cfg.gateways, cfg.sets, cfg.users, cfg.qps, dur, ramp, cfg.sendRate, cfg.chatRate, r.Dir)
	cl, stop, err := newCluster(ctx, &cfg, r, cfg.sets, cfg.gateways)
	if err != nil {
		return err
	}
	defer stop()
	if err := cl.Start(ctx, cfg.gateways); err != nil {
		return err
	}
	for _, g := range cl.Gateways {
		r.Say("gateway %d/%d pid %d serving %s, admin %s", g.Node, cfg.gateways, g.Srv.PID, g.Srv.Listen, g.Srv.Admin.URL)
		r.Step(fmt.Sprintf("gateway %d", g.Node), g.Srv.CommandLine())
	}

	client, err := r.StartClient(ctx, cl.Gateways[0].Srv, harness.ClientConfig{
		Bin: cfg.Client(), Users: harness.Users(cfg.users), Aligned: true,
		Phases: fmt.Sprintf("0@%s,%d@%s", ramp, cfg.qps, dur),
		Flags: []string{"-duration", (ramp + dur).String(), "-procs", strconv.Itoa(procs(cfg.users)), "-send-rate", fmt.Sprint(cfg.sendRate),
			"-send-recipients", strconv.Itoa(cfg.camps.Recipients), "-chat-rate", fmt.Sprint(cfg.chatRate), "-connect-rate", "10000", "-timeout", "10s", "-grace", "10s"},
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second, Stdout: r.Stdout, Stderr: r.Stderr,
	})
	if err != nil {
		return err
	}
	r.Say("%s", client.CommandLine())
	end := client.Start.Add(ramp + dur)

	res := demoResult{Command: "democluster " + strings.Join(os.Args[1:], " "), Users: cfg.users, QPS: cfg.qps, Duration: dur.String(), Failures: []string{}}
	fail := func(format string, args ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, args...)) }
	// The campaigns, once the users are in, POSTed on gateway 1.
	if n, err := harness.WaitLogins(ctx, cl.Logins, int64(cfg.users), time.Now().Add(ramp+5*time.Second), client); err != nil {
		r.Say("%v; starting the campaigns anyway", err)
	} else {
		r.Say("%d users connected over %d gateways at +%.1fs", n, cfg.gateways, time.Since(client.Start).Seconds())
	}
	secs := max(1, int(time.Until(end.Add(-harness.CampaignMargin)).Seconds()))
	if _, err := r.StartCampaigns(cl.Admin(1), cfg.camps, secs, " on gateway 1, dealt by parts on every gateway"); err != nil {
		fail("campaigns: %v", err)
	}
	if err := client.Wait(); err != nil {
		res.ClientErr = err.Error()
		fail("loadclient: %v", err)
	}
	res.Client, _ = client.ReadReport()
	res.Gateways, res.Cluster, res.Checks = collect(cl, &res.Failures)
	if !harness.Reconciled(res.Client) {
		fail("the load client's strict reconciliation with /cluster/stats did not pass")
	}
	for i, g := range cl.Gateways {
		t0 := time.Now()
		code, err := g.Srv.Stop(30 * time.Second)
		res.Gateways[i].Exit = fmt.Sprintf("exit %d after SIGTERM in %v", code, time.Since(t0).Round(time.Millisecond))
		if err != nil {
			fail("gateway %d: %v", g.Node, err)
		}
		g.Srv = nil
	}
	report(r, "democluster", demoReport(&res, cfg), res, "gateway*.log, loadclient.log, report.json, timeline.csv, commands.txt")
	if len(res.Failures) > 0 {
		return errors.New(strings.Join(res.Failures, "; "))
	}
	r.Say("PASS")
	return nil
}

// collect settles every gateway's ledger and reads its campaigns and
// crossings, and the cluster's summed ledger, and checks the invariants of
// each gateway and of the cluster (the campaigns' parts summed).
func collect(cl *harness.Cluster, failures *[]string) ([]gatewayResult, harness.ClusterStats, []harness.LedgerCheck) {
	var out []gatewayResult
	var all []harness.Campaign
	for _, g := range cl.Gateways {
		r := gatewayResult{Node: g.Node, PID: g.Srv.PID, Listen: g.Srv.Listen, Admin: g.Srv.Admin.URL}
		l, err := g.Srv.Admin.Settle(15*time.Second, true, ledgerChecks)
		if err != nil {
			*failures = append(*failures, fmt.Sprintf("gateway %d: %v", g.Node, err))
		}
		r.Stats, r.Campaigns, r.Checks = l.Stats, l.Campaigns, l.Checks
		all = append(all, l.Campaigns...)
		for _, b := range harness.FailedChecks(r.Checks) {
			*failures = append(*failures, fmt.Sprintf("gateway %d: %s", g.Node, b))
		}
		r.Crossings, _ = harness.ReadCrossings(g.Srv.Admin)
		out = append(out, r)
	}
	cs, err := harness.ReadClusterStats(cl.Admin(0))
	if err != nil {
		*failures = append(*failures, fmt.Sprintf("GET /cluster/stats: %v", err))
	}
	if len(cs.Missing) > 0 {
		*failures = append(*failures, fmt.Sprintf("GET /cluster/stats: gateways %v did not answer", cs.Missing))
	}
	checks := ledgerChecks(&cs.Stats, all)
	for _, b := range harness.FailedChecks(checks) {
		*failures = append(*failures, "cluster: "+b)
	}
	return out, cs, checks
}

// ledgerChecks are the ledger's two invariants and that the shake
// campaigns' parts created what they dealt; the send campaigns share
// envelopes.created with the load client's SENDs, so their envelopes are
// checked as at most what was created.
func ledgerChecks(st *harness.Stats, camps []harness.Campaign) []harness.LedgerCheck {
	checks := harness.LedgerChecks(st, nil)
	shake, _, sendN := harness.Dealt(camps)
	if len(camps) == 0 {
		return checks
	}
	e := &st.Envelopes
	return append(checks,
		harness.LedgerCheck{Name: "shake campaigns' amount = shake.created_amount", Left: shake, Right: st.Shake.CreatedAmount},
		harness.LedgerCheck{Name: "min(send campaigns' envelopes, created + skipped) = send campaigns' envelopes", Left: min(sendN, e.Created+e.SystemSkipped), Right: sendN})
}
