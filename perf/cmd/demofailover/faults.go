package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/steprun"
)

// fault is one fault and what it did.
type fault struct {
	Kind     string          `json:"kind"` // kill, stop, nats
	Target   string          `json:"target"`
	node     int             // the gateway's, or the NATS server's
	AtS      float64         `json:"at_s"`                 // since the load's start
	Moved    []int           `json:"moved_sets,omitempty"` // the target's SETs, to be served elsewhere
	Measured []int           `json:"measured_sets"`        // SETs whose first money answer is timed
	FirstMs  map[int]float64 `json:"first_money_ms"`       // the fault to each measured SET's first money answer
	MaxMs    float64         `json:"first_money_max_ms"`
	MedMs    float64         `json:"first_money_median_ms"`
	GapMs    float64         `json:"longest_gap_ms"` // the longest any SET went without money, from the fault to the window's end
	Empty    map[int]int     `json:"probe_empty"`    // SHAKE_RESULT 0 to each SET's probe: its pool ran dry
	Took     []takeover      `json:"takeovers,omitempty"`
	Before   int64           `json:"money_before"` // /cluster/stats got_amount + opened_amount right before the fault: at least what was told by then
	After    int64           `json:"money_after"`  // the same once the cluster settled
	// Fenced: money answers of the stopped gateway, run again, to its
	// witnesses of the SETs taken over before SIGCONT: there must be none.
	Fenced    int      `json:"fenced_money_answers"`
	Witnessed int      `json:"witnessed_sets,omitempty"`
	Answers   int      `json:"witness_answers,omitempty"`
	Exit      string   `json:"exit,omitempty"`
	Restart   string   `json:"restart,omitempty"`
	Problems  []string `json:"problems,omitempty"`
}

// takeover is a survivor's "serving SET" log line.
type takeover struct {
	Set   int     `json:"set"`
	Node  int     `json:"node"`
	Epoch uint64  `json:"epoch"`
	Was   string  `json:"was"`
	Ms    float64 `json:"took_ms"` // its claim to serving
}

func (f *fault) problem(format string, args ...any) {
	f.Problems = append(f.Problems, fmt.Sprintf(format, args...))
}

// runner runs the faults on a cluster under load.
type runner struct {
	cfg config
	r   *steprun.Run
	ps  *probes
	csv io.Writer // probes.csv
}

// owners is each SET's gateway by the first running gateway that answers
// GET /cluster (-1: none).
func (x *runner) owners() ([]int, error) {
	err := fmt.Errorf("no gateway answers GET /cluster")
	for _, g := range x.r.Cl.Gateways {
		if g.Srv != nil {
			m, e := harness.ReadClusterMap(g.Srv.Admin)
			if e == nil {
				return m.Owners(x.cfg.Sets), nil
			}
			err = e
		}
	}
	return nil, err
}

// waitOwned waits until every SET has an owner.
func (x *runner) waitOwned(timeout time.Duration) ([]int, error) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		own, err := x.owners()
		if err == nil && !slices.Contains(own, -1) {
			return own, nil
		}
		if time.Now().After(deadline) {
			return own, fmt.Errorf("SETs without an owner %v after: owners %v (%v)", timeout, own, err)
		}
	}
}

// pick is the gateway that runs the most SETs, the lowest of a tie.
func pick(owners []int) int {
	count := make([]int, gateways)
	for _, o := range owners {
		if o >= 0 {
			count[o]++
		}
	}
	return slices.Index(count, slices.Max(count))
}

// fault runs one fault of kind and measures it.
func (x *runner) fault(ctx context.Context, k int, kind string) *fault {
	cfg := &x.cfg
	f := &fault{Kind: kind, FirstMs: map[int]float64{}, Empty: map[int]int{}}
	all := make([]int, cfg.Sets)
	for s := range all {
		all[s] = s
	}
	own, err := x.owners()
	if err != nil {
		f.problem("before the fault: %v", err)
		return f
	}
	if kind == "nats" {
		f.node = max(0, x.r.JS.StreamLeader(ctx, stream))
		f.Target = fmt.Sprintf("NATS server %s (pid %d, the journal stream's leader)", x.r.JS.Name(f.node), x.r.JS.PID(f.node))
		f.Measured = all
	} else {
		f.node = pick(own)
		if x.r.Cl.Gateways[f.node].Srv == nil {
			f.problem("gateway %d, which the records say runs the most SETs, is down", f.node)
			return f
		}
		f.Target = fmt.Sprintf("gateway %d (pid %d)", f.node, x.r.Cl.Gateways[f.node].Srv.PID)
		for s, o := range own {
			if o == f.node {
				f.Moved = append(f.Moved, s)
			}
		}
		f.Measured = f.Moved
	}
	x.ps.start(ctx)
	pre := time.Now()
	if miss := x.ps.moneyAfter(ctx, all, pre, false, pre.Add(5*time.Second)); len(miss) > 0 {
		f.problem("SETs %v answered no money in the 5s before the fault (%s)", miss, x.ps.why(miss))
	}
	victim := f.node // the gateway not to ask
	if kind == "nats" {
		victim = -1
	}
	if f.Before, _, err = x.r.Cl.Money(victim, 3*time.Second); err != nil {
		f.problem("/cluster/stats before the fault: %v", err)
	}
	t0 := time.Now()
	f.AtS = t0.Sub(x.r.LoadStart).Seconds()
	from := t0 // the measured SETs answer money after this
	switch kind {
	case "kill":
		x.r.Step(fmt.Sprintf("fault: kill -9 gateway %d", f.node), fmt.Sprintf("kill -9 %d", x.r.Cl.Gateways[f.node].Srv.PID))
		x.r.Cl.Kill(f.node)
	case "stop":
		srv := x.r.Cl.Gateways[f.node].Srv
		wit, err := dialWitnesses(srv.Listen, f.Moved, cfg.Sets)
		if err != nil {
			f.problem("%v", err)
		}
		x.r.Step(fmt.Sprintf("fault: gateway %d stopped past its lease", f.node), fmt.Sprintf("kill -STOP %d; sleep %g; kill -CONT %d", srv.PID, cfg.stopFor.Seconds(), srv.PID))
		// The witnesses' SHAKEs go once every thread is stopped: sent
		// earlier, the gateway could still carry them out before it stops.
		if err := srv.Pause(time.Second); err != nil {
			f.problem("%v", err)
		}
		if wit != nil {
			wit.send()
		}
		harness.Sleep(ctx, cfg.stopFor)
		srv.Signal(syscall.SIGCONT)
		cont := time.Now()
		if wit != nil {
			wit.read(10 * time.Second)
			x.fenced(f, wit, t0, cont)
		}
		code, ok := srv.Wait(15 * time.Second)
		f.Exit = fmt.Sprintf("exit %d %.2fs after SIGCONT", code, time.Since(cont).Seconds())
		switch {
		case !ok:
			f.problem("gateway %d still runs 15s after SIGCONT: a fenced gateway must exit 3", f.node)
			f.Exit = "still running 15s after SIGCONT: killed"
			srv.Kill()
		case code != 3:
			f.problem("gateway %d exited %d after SIGCONT: want 3 (it lost its SETs)", f.node, code)
		}
		if why := lostLine(srv.Log); why != "" {
			f.Exit += "; it logged: lost a SET: " + why
		}
		x.r.Cl.Gateways[f.node].Srv = nil
	case "nats":
		x.r.Step("fault: kill -9 "+f.Target+", restarted after "+cfg.natsDown.String(), fmt.Sprintf("kill -9 %d; sleep %g; %s", x.r.JS.PID(f.node), cfg.natsDown.Seconds(), x.r.JS.CommandLine(f.node)))
		x.r.JS.Kill(f.node)
		harness.Sleep(ctx, cfg.natsDown)
		if err := x.r.JS.Restart(f.node); err != nil {
			f.problem("restarting %s: %v", x.r.JS.Name(f.node), err)
		} else if err := x.r.JS.WaitJetStream(ctx, 30*time.Second); err != nil {
			f.problem("%v", err)
		}
		from = time.Now()
		f.Restart = fmt.Sprintf("restarted after %.1fs", from.Sub(t0).Seconds())
	}
	if miss := x.ps.moneyAfter(ctx, f.Measured, from, kind != "nats", from.Add(cfg.window)); len(miss) > 0 {
		f.problem("SETs %v answered no money within %v (%s)", miss, cfg.window, x.ps.why(miss))
	}
	if kind != "nats" {
		rs := time.Now()
		if err := x.r.Cl.Restart(ctx, f.node); err != nil {
			f.problem("restarting gateway %d: %v", f.node, err)
		} else {
			f.Restart = fmt.Sprintf("restarted %.2fs after the fault (pid %d), serving in %.2fs", rs.Sub(t0).Seconds(), x.r.Cl.Gateways[f.node].Srv.PID, time.Since(rs).Seconds())
			x.r.Step(fmt.Sprintf("gateway %d restarted", f.node), x.r.Cl.Gateways[f.node].Srv.CommandLine())
		}
	}
	end := time.Now()
	x.ps.end()
	x.ps.dump(x.csv, k, x.r.LoadStart)
	var firsts []float64
	for _, s := range f.Measured {
		if t, ok := x.ps.p[s].firstAfter(t0, kind != "nats"); ok {
			f.FirstMs[s] = harness.Millis(t.Sub(t0))
			firsts = append(firsts, f.FirstMs[s])
		}
	}
	f.MaxMs, f.MedMs = harness.MaxMedian(firsts)
	for _, p := range x.ps.p {
		f.GapMs = max(f.GapMs, harness.Millis(p.gapAfter(t0, end)))
		if p.empty > 0 {
			f.Empty[p.set] = p.empty
		}
	}
	x.supervise(ctx, f)
	if err := x.r.Cl.WaitUp(20 * time.Second); err != nil {
		f.problem("after the fault: %v", err)
	}
	if err := x.r.Cl.WaitRunning(cfg.window); err != nil {
		f.problem("after the fault: %v", err)
	}
	// A SET moving back to the restarted gateway is in neither gateway's
	// figures for the move's pause: read again until they hold what was
	// counted before, for 10 s at most.
	harness.Poll(10*time.Second, 200*time.Millisecond, func() error {
		if f.After, _, err = x.r.Cl.Money(-1, 10*time.Second); err == nil && f.After < f.Before {
			return errors.New("less than before")
		}
		return nil // an error of /cluster/stats is told below, not waited out
	})
	if err != nil {
		f.problem("/cluster/stats after the fault: %v", err)
	} else if f.After < f.Before {
		f.problem("money counted after the fault %d < counted before it %d (which holds every fen told by then): %d fen lost", f.After, f.Before, f.Before-f.After)
	}
	f.Took = x.takeovers(t0)
	return f
}

// fenced counts the witnesses' money answers of the SETs taken over while
// their gateway was stopped (a fresh probe's money elsewhere between the
// fault at t0 and SIGCONT at cont): each is money a fenced gateway told.
func (x *runner) fenced(f *fault, w *witnesses, t0, cont time.Time) {
	for i, s := range w.sets {
		if at, ok := x.ps.p[s].firstAfter(t0, true); !ok || at.After(cont) {
			continue // not yet taken over when the gateway ran again: its money may be its own
		}
		f.Witnessed++
		f.Answers += w.answered[i]
		f.Fenced += w.money[i]
		if w.money[i] > 0 {
			f.problem("SET %d: the stopped gateway answered %d SHAKEs with money after another took the SET over (its witness's connection: %s)", s, w.money[i], w.ended[i])
		}
	}
	if f.Witnessed == 0 {
		f.problem("no SET of the stopped gateway was taken over before SIGCONT: nothing witnessed")
	}
}

// supervise restarts, as a supervisor would, a gateway that exited by
// itself during a fault: a problem unless it was the fault's target.
func (x *runner) supervise(ctx context.Context, f *fault) {
	for _, g := range x.r.Cl.Gateways {
		if g.Srv == nil {
			continue
		}
		code, exited := g.Srv.Wait(0)
		if !exited {
			continue
		}
		f.problem("gateway %d exited %d during the fault (%s)", g.Node, code, lostLine(g.Srv.Log))
		g.Srv = nil
		if err := x.r.Cl.Restart(ctx, g.Node); err != nil {
			f.problem("restarting gateway %d: %v", g.Node, err)
		}
	}
}

// takeovers are the "serving SET" lines the running gateways logged since t.
func (x *runner) takeovers(t time.Time) []takeover {
	var out []takeover
	for _, g := range x.r.Cl.Gateways {
		if g.Srv == nil {
			continue
		}
		harness.ScanLog(g.Srv.Log, "serving SET", func(at time.Time, line []byte) {
			var l struct {
				takeover
				Took json.RawMessage `json:"took"`
			}
			if at.After(t) && json.Unmarshal(line, &l) == nil {
				l.Node, l.Ms = g.Node, harness.Millis(harness.LogDuration(l.Took))
				out = append(out, l.takeover)
			}
		})
	}
	slices.SortFunc(out, func(a, b takeover) int { return a.Set - b.Set })
	return out
}

// lostLine is the why of the last "lost a SET" line of the log at path.
func lostLine(path string) string {
	why := ""
	harness.ScanLog(path, "lost a SET", func(_ time.Time, line []byte) {
		var l struct {
			Set int    `json:"set"`
			Why string `json:"why"`
		}
		if json.Unmarshal(line, &l) == nil {
			why = fmt.Sprintf("SET %d: %s", l.Set, l.Why)
		}
	})
	return why
}
