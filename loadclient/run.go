package loadclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

// Run runs the load described by cfg (filled and validated, see ParseFlags) until its
// duration is over or ctx is done, then drains, reconciles and reports. It prints the live
// line and the summary to out and writes cfg.Report and cfg.Timeline. The error is non-nil
// when the run failed: a connect, reset, timeout or protocol error, a reconciliation
// mismatch, or a failure of the client itself; the report is returned whenever there is one.
// First it sets the scheduling policy of the process's threads to cfg.Sched, if any (a
// failure to is a warning on out).
func Run(ctx context.Context, cfg *Config, out io.Writer) (*Report, error) {
	if cfg.Sched != "" {
		if err := setSched(cfg.Sched); err != nil {
			// A fidelity of the measurement, not a condition of the run.
			fmt.Fprintf(out, "loadclient: warning: %v: the threads keep the policy they had\n", err)
		}
	}
	if cfg.Procs > 1 {
		return runParent(ctx, cfg, out)
	}
	if cfg.child {
		return nil, runChild(ctx, cfg, os.Stdin, out)
	}
	return runLocal(ctx, cfg, out)
}

// source is where the per-second figures come from: this process's loops, or the children
// of a -procs parent. Its methods are safe for concurrent use.
type source interface {
	setRate(qps uint32, atNs int64)
	endNow()
	poll(total *counters, live *LatencyHistogram)
}

// startOf returns the run's start: the one a parent chose, or the next whole second.
func startOf(cfg *Config) int64 {
	if cfg.startNs != 0 {
		return cfg.startNs
	}
	return (time.Now().UnixNano()/nsPerSec + 1) * nsPerSec
}

// tickLag is how long after each whole second a process reads its loops' figures: they
// publish on the second (loop.publish), and this leaves them time to.
const tickLag = 20 * time.Millisecond

// rateNotice is how far ahead of its boundary a run-time rate change must be known: it takes
// effect at the first whole second at least this far away, so that every loop and every
// child process has it before the boundary and all switch at the same send.
const rateNotice = 50 * time.Millisecond

// rates tracks the target rate over time, for the live line: the plan and the run-time
// changes, with Schedule.SetRate's rules. Safe for concurrent use.
type rates struct {
	mu      sync.Mutex
	changes []RateChange // boundaries ascending
}

func newRates(plan []RateChange) *rates {
	r := &rates{}
	for _, c := range plan {
		r.set(c.QPS, c.AtNs)
	}
	return r
}

// set records qps from the first whole second at or after atNs and returns that second.
func (r *rates) set(qps uint32, atNs int64) int64 {
	b := (atNs + nsPerSec - 1) / nsPerSec * nsPerSec
	r.mu.Lock()
	defer r.mu.Unlock()
	k := sort.Search(len(r.changes), func(k int) bool { return r.changes[k].AtNs >= b })
	r.changes = append(r.changes[:k], RateChange{QPS: qps, AtNs: b})
	return b
}

// at returns the target rate at t.
func (r *rates) at(t int64) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var q uint32
	for _, c := range r.changes {
		if c.AtNs > t {
			break
		}
		q = c.QPS
	}
	return q
}

// changeRate applies a run-time rate change to src and the target: from the first whole
// second at least rateNotice away. It returns that second.
func changeRate(src source, rt *rates, qps uint32) int64 {
	at := time.Now().Add(rateNotice).UnixNano()
	b := rt.set(qps, at)
	src.setRate(qps, at)
	return b
}

// drive ticks once a second (rep.lagNs after each whole second from the start) until the end
// of the run, or until ctx is done, which ends it early, feeding the reporter.
func drive(ctx context.Context, src source, rep *reporter, endNs int64) {
	next := rep.startNs + rep.lagNs
	endNs += rep.lagNs
	for now := time.Now().UnixNano(); next <= now; next += nsPerSec {
	}
	timer := time.NewTimer(time.Duration(next - time.Now().UnixNano()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			src.endNow()
			return
		case <-timer.C:
			now := time.Now().UnixNano()
			var cur counters
			live := new(LatencyHistogram)
			src.poll(&cur, live)
			rep.tick(now, &cur, live)
			if now >= endNs {
				return
			}
			next += nsPerSec
			timer.Reset(time.Duration(min(next, endNs) - now))
		}
	}
}

// quietFor is how long a draining process waits with nothing of the kind it waits for in
// flight before it trusts that nothing more is coming: three publish periods, so the figures
// of every loop have been refreshed since.
const quietFor = 3 * publishEvery

// holdAck bounds the wait, past the deadline, for every loop's copy from after the hold.
const holdAck = time.Second

// drainLocal ends this process's run in two steps and returns its figures, which no longer
// change. First the loops go on opening pushes until nothing but OPENs has been in flight
// for quietFor: the run's answers are in, and the pushes of its own SENDs, which come with
// their SEND_ACK or just after, have been opened. A server may push without end (a send
// campaign), and each OPEN moves money, so then the loops hold: later pushes are counted,
// not opened. Opens under way go on, holding or not: their OPENs are sent again (after
// status 5, or after a login when their connection ended) until a final answer settles the
// money they may have drawn. It waits until no open is under way, nothing is in flight and
// nothing has been for quietFor more, so that the server's counting of its last answers is
// done too; the server's figures read from then on are of the same money. drained is false
// when deadline came first: cur.OpenPending then counts the opens left unresolved, which the
// loops, told to settle, send no more.
func drainLocal(eng engine, deadline int64) (cur counters, drained bool) {
	defer eng.settle()
	// The run's own requests: OPENs aside, which answer the server's pushes.
	own := func(c *counters) (inflight int64, sent uint64) {
		for r := range nReq {
			if r != reqOpen {
				inflight += c.inflight(r)
				sent += c.Sent[r]
			}
		}
		return inflight, sent
	}
	quietSince := time.Now().UnixNano()
	var lastSent uint64
	for {
		cur = counters{}
		eng.poll(&cur, new(LatencyHistogram))
		now := time.Now().UnixNano()
		inflight, sent := own(&cur)
		if inflight != 0 || sent != lastSent {
			quietSince = now
		}
		lastSent = sent
		if now-quietSince >= int64(quietFor) || now >= deadline {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	loops := int64(eng.hold())
	quietSince = time.Now().UnixNano()
	for {
		cur = counters{}
		eng.poll(&cur, new(LatencyHistogram))
		now := time.Now().UnixNano()
		held := cur.Holding == loops
		if !held || cur.inflightAll() != 0 || cur.OpenPending != 0 || cur.ShakePending != 0 {
			quietSince = now
		}
		if now-quietSince >= int64(quietFor) {
			return cur, true
		}
		if now >= deadline && held || now >= deadline+int64(holdAck) {
			return cur, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// memoryOf measures the heap and stacks in use after a collection, with the connections up.
func memoryOf(users int64) *MemoryReport {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := &MemoryReport{HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse, Users: users}
	if users > 0 {
		m.PerUser = float64(ms.HeapInuse+ms.StackInuse) / float64(users)
	}
	return m
}

// runLocal runs the whole load in this process.
func runLocal(ctx context.Context, cfg *Config, out io.Writer) (*Report, error) {
	var base *baseline
	if cfg.Reconcile != ReconcileOff {
		var err error
		if base, err = readBaseline(cfg); err != nil {
			return nil, err
		}
	}
	startNs := startOf(cfg)
	plan, err := newRunPlan(cfg, startNs)
	if err != nil {
		return nil, err
	}
	if cfg.History != "" {
		if plan.history, err = openHistory(cfg.History); err != nil {
			return nil, err
		}
	}
	eng, err := newEngine(plan)
	if err != nil {
		plan.history.close()
		return nil, err
	}
	rt := newRates(plan.changes)
	rep := newReporter(cfg, startNs, rt, out)
	rep.lagNs = int64(tickLag)
	if cfg.Control != "" {
		stop, err := serveControl(cfg.Control, eng, rt, rep)
		if err != nil {
			eng.stop()
			return nil, err
		}
		defer stop()
	}
	drive(ctx, eng, rep, plan.endNs)
	cur, drained := drainLocal(eng, time.Now().Add(cfg.Grace).UnixNano())
	var rec *ReconcileReport
	if cfg.Reconcile != ReconcileOff {
		rec = reconcile(cfg, base, &cur, drained)
	}
	mem := memoryOf(cur.Users)
	res := eng.stop()
	if err := plan.history.close(); err != nil && res.err == nil {
		res.err = fmt.Errorf("-history: %w", err)
	}
	return finish(cfg, rep, res, rec, mem, out)
}

// finish builds the report of a run, prints the summary, writes the files and decides the
// verdict.
func finish(cfg *Config, rep *reporter, res *loadResult, rec *ReconcileReport, mem *MemoryReport, out io.Writer) (*Report, error) {
	r := buildReport(cfg, rep, res, rec, mem)
	r.WriteSummary(out)
	var errs []error
	if cfg.Report != "" {
		if err := r.WriteJSON(cfg.Report); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.Timeline != "" {
		if err := rep.writeTimeline(cfg.Timeline); err != nil {
			errs = append(errs, err)
		}
	}
	if res.err != nil {
		errs = append(errs, res.err)
	}
	c := &res.counters
	n := c.failures()
	if cfg.Reconcile == ReconcileAtLeast || cfg.Restarts { // restarts of the server: refused connects and resets expected
		n -= c.Errors[errConnect] - c.NoOwner + c.Errors[errReset] - c.Moved // those two not counted by failures already
	}
	if n > 0 {
		err := fmt.Errorf("%d errors: connect %d, reset %d, timeout %d, protocol %d",
			n, c.Errors[errConnect], c.Errors[errReset], c.Errors[errTimeout], c.Errors[errProtocol])
		if k := r.ConnectFailures.Kinds; len(k) > 0 {
			err = fmt.Errorf("%w; connect failures mostly %s ×%s, the first: %s", err, k[0].Kind, thousands(k[0].Count), k[0].First)
		}
		errs = append(errs, err)
	}
	if rec != nil && !rec.OK {
		errs = append(errs, errors.New(rec.Summary()))
	}
	return r, errors.Join(errs...)
}
