package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// campaignMargin is how long before the end of the load the campaigns are
// sized to end, so that the client opens every system envelope while it
// still runs.
const campaignMargin = 3 * time.Second

// gatewayResult is one gateway after the run.
type gatewayResult struct {
	Node      int                   `json:"node"`
	PID       int                   `json:"pid"`
	Listen    string                `json:"listen"`
	Admin     string                `json:"admin"`
	Stats     harness.Stats         `json:"stats"`
	Campaigns []harness.Campaign    `json:"campaigns"`
	Crossings crossingMetrics       `json:"crossings"`
	Checks    []harness.LedgerCheck `json:"checks"`
	Exit      string                `json:"exit"`
}

// demoResult is summary.json.
type demoResult struct {
	Date      string                `json:"date"`
	Command   string                `json:"command"`
	Users     int                   `json:"users"`
	QPS       int                   `json:"qps"`
	Duration  string                `json:"duration"`
	Gateways  []gatewayResult       `json:"gateways"`
	Cluster   clusterStats          `json:"cluster"`
	Checks    []harness.LedgerCheck `json:"cluster_checks"`
	Client    *loadclient.Report    `json:"client,omitempty"`
	ClientErr string                `json:"client_error,omitempty"`
	Failures  []string              `json:"failures"`
}

// clientFlags are the load client's flags of a cluster run over users.
func clientFlags(c config, total time.Duration) []string {
	return []string{"-duration", total.String(), "-procs", strconv.Itoa(procs(c.users)),
		"-send-rate", fmt.Sprint(c.sendRate), "-send-recipients", strconv.Itoa(c.recips),
		"-chat-rate", fmt.Sprint(c.chatRate), "-connect-rate", "10000", "-timeout", "10s", "-grace", "10s"}
}

func runDemo(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	dir, path, err := harness.RunDir(cfg.Out, "democluster-")
	if err != nil {
		return err
	}
	ramp, dur := cfg.ramp.Round(time.Second), cfg.duration.Round(time.Second)
	fmt.Fprintf(stdout, "democluster: %d gateways, %d SETs, %d users, %d SHAKE/s for %v after a %v ramp; SEND %v/s, CHAT %v/s; files in %s/\n",
		cfg.gateways, cfg.sets, cfg.users, cfg.qps, dur, ramp, cfg.sendRate, cfg.chatRate, dir)
	cmds, _ := os.Create(path("commands.txt"))
	defer cmds.Close()

	cl := &cluster{bin: filepath.Join(cfg.Bin, "server"), sets: cfg.sets, timeout: cfg.timeout.String(),
		extra: strings.Fields(cfg.ServerFlags), dir: dir, echo: stderr}
	defer cl.cleanup()
	if err := startCluster(ctx, cl, cfg.gateways); err != nil {
		return err
	}
	fmt.Fprintf(cmds, "# NATS inside democluster at %s\n", cl.natsURL())
	for _, g := range cl.gws {
		fmt.Fprintf(stdout, "democluster: gateway %d/%d pid %d serving %s, admin %s\n", g.node, cfg.gateways, g.srv.PID, g.srv.Listen, g.srv.Admin.URL)
		fmt.Fprintln(cmds, g.srv.CommandLine())
	}

	gw0 := cl.gws[0].srv
	client, err := harness.StartClient(ctx, gw0, harness.ClientConfig{
		Bin: filepath.Join(cfg.Bin, "loadclient"), Dir: dir, Users: cfg.users,
		Phases: fmt.Sprintf("0@%s,%d@%s", ramp, cfg.qps, dur), Flags: clientFlags(cfg, ramp+dur),
		Source: cfg.Source, More: cfg.ClientFlags, Grace: 30 * time.Second, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(cmds, client.CommandLine())
	fmt.Fprintf(stdout, "democluster: %s\n", client.CommandLine())
	end := client.Start.Add(ramp + dur)

	var failures []string
	fail := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	// The campaigns, once the users are in, POSTed on gateway 1.
	if n, err := cl.waitLogins(int64(cfg.users), ramp+5*time.Second); err != nil {
		fmt.Fprintf(stdout, "democluster: %v; starting the campaigns anyway\n", err)
	} else {
		fmt.Fprintf(stdout, "democluster: %d users connected over %d gateways at +%.1fs\n", n, cfg.gateways, time.Since(client.Start).Seconds())
	}
	secs := max(1, int(time.Until(end.Add(-campaignMargin)).Seconds()))
	_, err = cl.admin(1).StartCampaigns(cfg.shake, cfg.send, cfg.recips, secs, func(kind string, q url.Values, c harness.Campaign, err error) {
		if err == nil {
			fmt.Fprintf(stdout, "democluster: POST %s/campaigns/%s?%s → campaign %d (%ds), dealt by parts on every gateway\n", cl.admin(1).URL, kind, q.Encode(), c.ID, secs)
			fmt.Fprintf(cmds, "curl -X POST '%s/campaigns/%s?%s'\n", cl.admin(1).URL, kind, q.Encode())
		}
	})
	if err != nil {
		fail("campaigns: %v", err)
	}
	var clientErr error
	select {
	case clientErr = <-client.Done:
	case <-ctx.Done():
		clientErr = <-client.Done
	}
	res := demoResult{Date: time.Now().UTC().Format(time.RFC3339), Command: "democluster " + strings.Join(os.Args[1:], " "),
		Users: cfg.users, QPS: cfg.qps, Duration: dur.String()}
	if clientErr != nil {
		res.ClientErr = clientErr.Error()
		fail("loadclient: %v", clientErr)
	}
	if b, err := os.ReadFile(path("report.json")); err == nil {
		var rep loadclient.Report
		if json.Unmarshal(b, &rep) == nil {
			res.Client = &rep
		}
	}
	for _, g := range cl.gws {
		if _, err := g.srv.Admin.WaitConnections(0, false, 15*time.Second); err != nil {
			fail("gateway %d after the client left: %v", g.node, err)
		}
		if err := g.srv.Admin.WaitCampaigns(15 * time.Second); err != nil {
			fail("gateway %d: %v", g.node, err)
		}
	}
	res.Gateways, res.Cluster, res.Checks = collect(cl, &failures)
	if res.Client == nil || res.Client.Reconcile == nil || !res.Client.Reconcile.OK {
		fail("the load client's strict reconciliation with /cluster/stats did not pass")
	}
	for i, g := range cl.gws {
		t0 := time.Now()
		code, err := g.srv.Stop(30 * time.Second)
		res.Gateways[i].Exit = fmt.Sprintf("exit %d after SIGTERM in %v", code, time.Since(t0).Round(time.Millisecond))
		if err != nil {
			fail("gateway %d: %v", g.node, err)
		}
		g.srv = nil
	}
	res.Failures = failures
	if res.Failures == nil {
		res.Failures = []string{}
	}
	writeDemoReport(&res, cfg, stdout, path)
	fmt.Fprintf(stdout, "\ndemocluster: files in %s/ (report.txt, report.html, summary.json, gateway*.log, loadclient.log, report.json, timeline.csv, commands.txt)\n", dir)
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	fmt.Fprintln(stdout, "democluster: PASS")
	return nil
}

// collect reads every gateway's ledger, campaigns and crossings, and the
// cluster's summed ledger, and checks the invariants of each gateway and
// of the cluster (the campaigns' parts summed over the gateways).
func collect(cl *cluster, failures *[]string) ([]gatewayResult, clusterStats, []harness.LedgerCheck) {
	var out []gatewayResult
	var all []harness.Campaign
	for _, g := range cl.gws {
		r := gatewayResult{Node: g.node, PID: g.srv.PID, Listen: g.srv.Listen, Admin: g.srv.Admin.URL}
		l, err := g.srv.Admin.SettledLedger(2 * time.Second)
		if err != nil {
			*failures = append(*failures, fmt.Sprintf("gateway %d: %v", g.node, err))
		}
		r.Stats, r.Campaigns, r.Checks = l.Stats, l.Campaigns, ledgerChecks(&l.Stats, l.Campaigns)
		all = append(all, l.Campaigns...)
		for _, b := range harness.FailedChecks(r.Checks) {
			*failures = append(*failures, fmt.Sprintf("gateway %d: %s", g.node, b))
		}
		r.Crossings, _ = readCrossings(g.srv.Admin)
		out = append(out, r)
	}
	cs, _, err := readClusterStats(cl.admin(0))
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
