package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// result is summary.json.
type result struct {
	*steprun.Result
	Faults  []*fault             `json:"faults"`
	Probes  [2]int64             `json:"probes_told"` // fen, money answers
	Audit   []audit              `json:"audit"`
	Dropped int                  `json:"dropped"` // messages after a claim not from its owner, every SET, seen live or replayed
	History harness.HistoryCheck `json:"history"`
}

// plan is the faults in order: a kill, the stop, the NATS fault, the other kills.
func (c config) plan() []string {
	var p []string
	if c.stop {
		p = append(p, "stop")
	}
	if c.nats {
		p = append(p, "nats")
	}
	if c.kills == 0 {
		return p
	}
	return append(append([]string{"kill"}, p...), slices.Repeat([]string{"kill"}, c.kills-1)...)
}

func run(ctx context.Context, cfg config, command string) error {
	r, err := steprun.New("demofailover", command, cfg.StepLoad, cfg.RunFlags, cfg.load(), fmt.Sprintf("%d gateways, %d SETs, -replicas %d, -lease %v, -standby=%v",
		gateways, cfg.Sets, cfg.Replicas, cfg.Lease, cfg.standby))
	if err != nil {
		return err
	}
	defer r.Close()
	res := &result{Result: r.Res}
	r.Say("faults %s, %v apart", strings.Join(cfg.plan(), ", "), cfg.Slot)

	// The audit's NATS user, beside the gateways' (their JetStream permissions).
	pass := make([]byte, 16)
	rand.Read(pass)
	auditor := harness.NATSUser{Name: "demofailover-audit", Password: hex.EncodeToString(pass)}
	if err := r.StartCluster(ctx, cfg.RunFlags, gateways, []string{"-standby=" + strconv.FormatBool(cfg.standby)}, auditor); err != nil {
		return err
	}
	nc, err := nats.Connect(r.JS.URL(), nats.UserInfo(auditor.Name, auditor.Password), nats.Name(auditor.Name), nats.MaxReconnects(-1))
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
	x := &runner{cfg: cfg, r: r, ps: newProbes(cfg.Sets, r.Cl.Addrs(), cfg.probeEvery), csv: pcsv}
	own, err := x.waitOwned(15 * time.Second)
	if err != nil {
		return err
	}
	r.Say("SET owners: %v", own)
	// The campaigns end before the load does, so that the run's last
	// figures are of a cluster that no longer deals.
	endCampaigns := func(start time.Time) int {
		return max(1, int(time.Until(start.Add(cfg.Ramp+cfg.load()-harness.CampaignMargin)).Seconds()))
	}
	if err := r.StartLoad(ctx, cfg.RunFlags, endCampaigns, "-reconcile", "at-least", "-history", r.Path("history.csv")); err != nil {
		return err
	}
	r.Steps(ctx, "fault", cfg.plan(), cfg.window, func(k int, kind string) (string, string, []string) {
		f := x.fault(ctx, k, kind)
		res.Faults = append(res.Faults, f)
		return kind + " " + f.Target, fmt.Sprintf("at +%.1fs: %s", f.AtS, f.line()), f.Problems
	})

	r.EndLoad("at-least")
	res.Probes[0], res.Probes[1] = x.ps.told()
	if err := r.Cl.WaitRunning(10 * time.Second); err != nil {
		res.Fail("at the end: %v", err)
	}
	r.CheckCampaigns(30 * time.Second)
	r.Settle(res.Told() + res.Probes[0])
	// The load client's history, checked as Jepsen checks idempotence: each
	// request answered with money the same every time, each shake envelope
	// told to one request, and the fen told each request once what the
	// client counted told.
	if res.History, err = harness.CheckHistory(r.Path("history.csv")); err != nil {
		res.Fail("the load client's history: %v", err)
	} else {
		r.Say("history: %s", res.History)
		if !res.History.OK() || res.History.Amount != res.Told() {
			res.Fail("the load client's history: %s; the client counted %d fen told", res.History, res.Told())
		}
	}
	if err := w.replay(ctx, nc, auditor.Name, r.Layout); err != nil {
		res.Fail("replaying the journal: %v", err)
	}
	r.StopGateways(30 * time.Second)
	if res.Audit, err = w.end(ctx, 10*time.Second); err != nil {
		res.Fail("%v", err)
	}
	var which string
	if res.Dropped, which = dropped(res.Audit); res.Dropped > 0 {
		res.Fail("JetStream holds %d messages after a claim from a gateway other than the claimant (%s): answers a fenced gateway sent", res.Dropped, which)
	}
	return r.Finish(report(res, cfg), res, "journal.csv, probes.csv, history.csv, gateway*.log, loadclient.log, report.json, timeline.csv, commands.txt")
}
