package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// step is one step of the run and what it did.
type step struct {
	Kind     string   `json:"kind"` // restart, join, leave
	Node     int      `json:"node"`
	AtS      float64  `json:"at_s"`  // since the load client's start
	EndS     float64  `json:"end_s"` // the cluster whole again
	Moves    []moved  `json:"moves"`
	PauseMax float64  `json:"pause_max_ms"`
	PauseMed float64  `json:"pause_median_ms"`
	P99Ms    float64  `json:"shake_p99_ms"` // the worst second's SHAKE p99 in the step
	Refused  uint64   `json:"refused"`      // answers "overloaded" in the step
	Before   int64    `json:"money_before"` // /cluster/stats got_amount + opened_amount: at least what was told by then
	After    int64    `json:"money_after"`
	Exit     string   `json:"exit,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// moved is a "SET moved" line of a gateway's log.
type moved struct {
	Set       int     `json:"set"`
	From      int     `json:"from_node"`
	To        string  `json:"to"`
	PauseMs   float64 `json:"pause_ms"`
	PrepareMs float64 `json:"prepare_ms"`
	at        time.Time
}

// result is summary.json.
type result struct {
	*steprun.Result
	LeadP99Ms float64 `json:"lead_shake_p99_ms"` // the worst second's before the first step
	Steps     []*step `json:"steps"`
}

func (s *step) problem(format string, args ...any) {
	s.Problems = append(s.Problems, fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg config, command string) error {
	r, err := steprun.New("demorolling", command, cfg.StepLoad, cfg.RunFlags, cfg.load(), fmt.Sprintf("%d gateways of -node I/%d, %d SETs, -replicas %d, -rebalance %v",
		gateways, nodes, cfg.Sets, cfg.Replicas, cfg.rebalance))
	if err != nil {
		return err
	}
	defer r.Close()
	res := &result{Result: r.Res}
	r.Say("steps %v, %v apart", steps, cfg.Slot)
	if err := r.StartCluster(ctx, cfg.RunFlags, nodes, []string{"-rebalance", cfg.rebalance.String(), "-shutdown-timeout", "60s"}); err != nil {
		return err
	}
	whole := func(time.Time) int { return int((cfg.Ramp + cfg.load()).Seconds()) }
	if err := r.StartLoad(ctx, cfg.RunFlags, whole, "-reconcile", "strict", "-restarts"); err != nil {
		return err
	}
	kinds := make([]string, len(steps))
	for i, st := range steps {
		kinds[i] = fmt.Sprintf("%s %d", st.kind, st.node)
	}
	r.Steps(ctx, "step", kinds, 0, func(k int, _ string) (string, string, []string) {
		s := runStep(ctx, cfg, r, steps[k-1].kind, steps[k-1].node)
		res.Steps = append(res.Steps, s)
		return fmt.Sprintf("%s gateway %d", s.Kind, s.Node), s.line(), s.Problems
	})

	r.EndLoad("strict")
	if c := res.Client; c != nil {
		// An OPEN in flight at ERROR 9 may have drawn its share at the
		// envelope's SET: the client counts it lost and sends it again, and
		// the strict reconciliation finds every share told. The others are
		// "not carried out" at ERROR 9: lost, only without it.
		for _, k := range []string{"SHAKE", "SEND", "CHAT"} {
			if q := c.Requests[k]; q != nil && q.Lost > 0 {
				res.Fail("%d %s requests lost (in flight on a connection that dropped without ERROR 9)", q.Lost, k)
			}
		}
		if u := c.OpenUnresolved; u != 0 {
			res.Fail("%d OPENs without a final answer at the end: a share drawn may never have been told", u)
		}
	}
	timeline, err := harness.ReadTimeline(r.Client.Timeline)
	if err != nil {
		res.Fail("%v", err)
	}
	res.LeadP99Ms, _ = window(timeline, (cfg.Ramp + 2*time.Second).Seconds(), (cfg.Ramp + cfg.Lead).Seconds())
	for _, s := range res.Steps {
		s.P99Ms, s.Refused = window(timeline, s.AtS, s.EndS)
	}
	r.CheckCampaigns(30 * time.Second)
	r.Settle(res.Told())
	r.StopGateways(60 * time.Second)
	return r.Finish(report(res, cfg), res, "gateway*.log, n*.log, loadclient.log, report.json, timeline.csv, commands.txt")
}

// runStep runs one step: kind restart, join or leave of gateway node.
// Its times are seconds since start, the load client's.
func runStep(ctx context.Context, cfg config, r *steprun.Run, kind string, node int) *step {
	s := &step{Kind: kind, Node: node}
	cl, start := r.Cl, r.Client.Start
	t0 := time.Now()
	s.AtS = t0.Sub(start).Seconds()
	var err error
	if s.Before, _, err = cl.Money(node, 5*time.Second); err != nil {
		s.problem("/cluster/stats before the step: %v", err)
	}
	switch kind {
	case "restart", "leave":
		g := cl.Gateways[node]
		r.Step(fmt.Sprintf("%s gateway %d", kind, node), fmt.Sprintf("kill -TERM %d", g.Srv.PID))
		code, err := g.Srv.Stop(60 * time.Second)
		s.Exit = fmt.Sprintf("exit %d %.2fs after SIGTERM", code, time.Since(t0).Seconds())
		if err != nil || code != 0 {
			s.problem("gateway %d: exit %d after SIGTERM (%v): want 0, every SET handed over", node, code, err)
		}
		g.Srv = nil
		if kind == "restart" {
			if err := cl.Restart(ctx, node); err != nil {
				s.problem("starting gateway %d again: %v", node, err)
				break
			}
			r.Step(fmt.Sprintf("gateway %d again", node), cl.Gateways[node].Srv.CommandLine())
			waitShare(cl, node, cfg, s)
		}
	case "join":
		g, err := cl.Join(ctx)
		if err != nil {
			s.problem("gateway %d joining: %v", node, err)
			break
		}
		r.Step(fmt.Sprintf("gateway %d joins", node), g.Srv.CommandLine())
		waitShare(cl, node, cfg, s)
	}
	if err := cl.WaitRunning(cfg.Slot / 2); err != nil {
		s.problem("after the step: %v", err)
	}
	end := time.Now()
	s.EndS = end.Sub(start).Seconds()
	if s.After, _, err = cl.Money(-1, 10*time.Second); err != nil {
		s.problem("/cluster/stats after the step: %v", err)
	} else if s.After < s.Before {
		s.problem("money counted after the step %d < counted before it %d: %d fen missing", s.After, s.Before, s.Before-s.After)
	}
	s.Moves = movesIn(r.Dir, t0, end)
	var pauses []float64
	for _, m := range s.Moves {
		pauses = append(pauses, m.PauseMs)
	}
	s.PauseMax, s.PauseMed = harness.MaxMedian(pauses)
	if len(s.Moves) == 0 {
		s.problem("no SET moved")
	}
	return s
}

// waitShare waits, within half a slot, until gateway node runs its share of
// the SETs over the running gateways (rounded down): what -rebalance moves
// to it.
func waitShare(cl *harness.Cluster, node int, cfg config, s *step) {
	running := 0
	for _, g := range cl.Gateways {
		if g.Srv != nil {
			running++
		}
	}
	share := cfg.Sets / running
	for deadline := time.Now().Add(cfg.Slot / 2); ; time.Sleep(50 * time.Millisecond) {
		m, _ := cl.Gateways[node].Srv.Admin.Metrics()
		if int(m["hongbao_cluster_sets_running"]) >= share {
			return
		}
		if time.Now().After(deadline) {
			s.problem("gateway %d runs %.0f SETs %v after it started; want its share, %d", node, m["hongbao_cluster_sets_running"], cfg.Slot/2, share)
			return
		}
	}
}

// movesIn are the "SET moved" lines of every gateway log in dir between t0
// and t1.
func movesIn(dir string, t0, t1 time.Time) []moved {
	logs, _ := filepath.Glob(filepath.Join(dir, "gateway*.log"))
	var out []moved
	for _, path := range logs {
		node, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(path), "gateway"), ".", 2)[0])
		harness.ScanLog(path, "SET moved", func(at time.Time, line []byte) {
			var l struct {
				Set       int     `json:"set"`
				To        string  `json:"to"`
				PauseMs   float64 `json:"pause_ms"`
				PrepareMs float64 `json:"prepare_ms"`
			}
			if !at.Before(t0) && !at.After(t1) && json.Unmarshal(line, &l) == nil {
				out = append(out, moved{Set: l.Set, From: node, To: l.To, PauseMs: l.PauseMs, PrepareMs: l.PrepareMs, at: at})
			}
		})
	}
	slices.SortFunc(out, func(a, b moved) int { return a.at.Compare(b.at) })
	return out
}

// window is the worst second's SHAKE p99 in the timeline over the seconds
// s0 to s1 touch (since the load client's start: a step shorter than a
// second has one), and the answers "overloaded" in them.
func window(tl []runlog.Second, s0, s1 float64) (p99Ms float64, refused uint64) {
	s0, s1 = math.Floor(s0), math.Ceil(s1)
	for _, sec := range tl {
		if sec.T >= s0 && sec.T <= s1 {
			p99Ms = max(p99Ms, float64(sec.P99.Microseconds())/1000)
			refused += uint64(sec.Overload)
		}
	}
	return p99Ms, refused
}
