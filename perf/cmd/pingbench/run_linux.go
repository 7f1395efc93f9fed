package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// drainTime bounds the wait for the PONGs of the last PINGs after the window.
const drainTime = 2 * time.Second

// result is one run of a mode; CPU over the window, busy the whole machine's.
type result struct {
	mode                 string
	pongs, sent, answers uint64 // pongs: in the window
	hist                 *loadclient.LatencyHistogram
	server, client, busy time.Duration
}

func run(ctx context.Context, cfg config) error {
	r, err := harness.NewRun(cfg.out, "pingbench-", "pingbench", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	runs := map[string][]result{}
	for i := range cfg.count {
		for _, mode := range cfg.modes {
			res, err := bench(ctx, cfg, r, mode, fmt.Sprintf("server-%s-%d.log", mode, i+1))
			if err != nil {
				return fmt.Errorf("-ingress %s, run %d: %w", mode, i+1, err)
			}
			runs[mode] = append(runs[mode], res)
		}
	}
	md := report(cfg, runs).Markdown()
	fmt.Print("\n" + md)
	r.Say("table and server logs in %s/", r.Dir)
	return errors.Join(os.WriteFile(r.Path("pingbench.md"), []byte(md), 0o644), r.WriteCommands())
}

// bench runs one server with -ingress mode through the closed PING loop.
func bench(ctx context.Context, cfg config, run *harness.Run, mode, log string) (r result, err error) {
	r = result{mode: mode, hist: new(loadclient.LatencyHistogram)}
	srv, err := run.StartServer(ctx, log, harness.ServerConfig{
		Bin: filepath.Join(cfg.bin, "server"), Args: append([]string{"-ingress", mode}, strings.Fields(cfg.server)...)})
	if err != nil {
		return r, err
	}
	defer srv.Kill()
	d := &harness.Dialer{Server: netip.MustParseAddrPort(srv.Listen), Sources: cfg.sources, Timeout: 10 * time.Second}
	fds, err := d.LoginMany(1, cfg.conns, 4, nil)
	defer harness.CloseAll(fds)
	if err != nil {
		return r, err
	}
	if _, err := srv.Admin.WaitConnections(int64(cfg.conns), true, 30*time.Second); err != nil {
		return r, err
	}
	run.Say("-ingress %s: server pid %d, %d connections × %d PINGs in flight, %d client loop(s), %v warm-up + %v",
		mode, srv.PID, cfg.conns, cfg.inflight, cfg.loops, cfg.warmup, cfg.duration)
	start := time.Now().Add(100 * time.Millisecond)
	winStart := start.Add(cfg.warmup)
	winEnd := winStart.Add(cfg.duration)
	var loops []*loop
	defer func() {
		for _, l := range loops {
			l.close()
		}
	}()
	for i := range cfg.loops {
		l, err := newLoop(fds[i*len(fds)/cfg.loops:(i+1)*len(fds)/cfg.loops], cfg.inflight)
		if err != nil {
			return r, err
		}
		l.startNs, l.winStart, l.winEnd, l.drainEnd = start.UnixNano(), winStart.UnixNano(), winEnd.UnixNano(), winEnd.Add(drainTime).UnixNano()
		loops = append(loops, l)
	}
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(l.run)
	}
	// CPU over the window, read at its edges.
	read := func(at time.Time) (srvCPU, self, busy time.Duration, err error) {
		time.Sleep(time.Until(at))
		srvCPU, err = harness.CPUTime(srv.PID)
		busy, err2 := harness.MachineBusy()
		return srvCPU, harness.SelfCPUTime(), busy, errors.Join(err, err2)
	}
	s0, c0, b0, err0 := read(winStart)
	s1, c1, b1, err1 := read(winEnd)
	wg.Wait() // bounded: every loop returns by its drainEnd
	r.server, r.client, r.busy = s1-s0, c1-c0, b1-b0
	errs := []error{err0, err1}
	for _, l := range loops {
		r.pongs += l.inWindow
		r.hist.Merge(l.hist)
		r.sent += l.sent
		r.answers += l.answered
		errs = append(errs, l.err)
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	if r.sent != r.answers {
		return r, fmt.Errorf("%d PINGs sent, %d PONGs read %v after the window", r.sent, r.answers, drainTime)
	}
	run.Say("  %.0f round trips/s, p50 %s, p99 %s; %d PINGs, every one answered",
		float64(r.pongs)/cfg.duration.Seconds(), harness.Ms(r.hist.Quantile(0.5)), harness.Ms(r.hist.Quantile(0.99)), r.sent)
	harness.CloseAll(fds)
	if _, err := srv.Admin.WaitConnections(0, false, 30*time.Second); err != nil {
		return r, fmt.Errorf("after closing: %w", err)
	}
	code, err := srv.Stop(30 * time.Second)
	run.Say("  server: SIGTERM, exit status %d", code)
	return r, err
}

// report is a table of each mode's median run, by round trips a second,
// with the range of its runs.
func report(cfg config, runs map[string][]result) harness.Doc {
	t := &harness.Table{Right: true, Head: []string{"ingress", "conns × in flight", "round trips/s (median of runs)", "range", "p50", "p99", "p99.9", "max",
		"server CPU (cores)", "client CPU (cores)", "rest of machine (cores)", "server CPU per round trip"}}
	secs := cfg.duration.Seconds()
	cores := func(cpu time.Duration) string { return fmt.Sprintf("%.2f", cpu.Seconds()/secs) }
	for _, mode := range cfg.modes {
		rs := slices.SortedFunc(slices.Values(runs[mode]), func(a, b result) int { return int(a.pongs) - int(b.pongs) })
		r, lo, hi := rs[(len(rs)-1)/2], float64(rs[0].pongs)/secs, float64(rs[len(rs)-1].pongs)/secs
		t.Add(mode, fmt.Sprintf("%d × %d", cfg.conns, cfg.inflight), fmt.Sprintf("%.0f", float64(r.pongs)/secs), fmt.Sprintf("%.0f–%.0f (%d runs)", lo, hi, len(rs)),
			harness.Ms(r.hist.Quantile(0.5)), harness.Ms(r.hist.Quantile(0.99)), harness.Ms(r.hist.Quantile(0.999)), harness.Ms(r.hist.Max()),
			cores(r.server), cores(r.client), cores(max(r.busy-r.server-r.client, 0)), fmt.Sprintf("%.2f µs", float64(r.server.Microseconds())/max(float64(r.pongs), 1)))
	}
	return harness.Doc{harness.Para("Command: `pingbench " + strings.Join(os.Args[1:], " ") + "`"), t,
		harness.Para(fmt.Sprintf("Latencies and CPU are the median run's. CPU from /proc/PID/stat (server) and getrusage (client, %d epoll loop(s)) over the %v window; the machine has %d cores shared with everything else (rest of machine = /proc/stat busy − server − client).",
			cfg.loops, cfg.duration, runtime.NumCPU()))}
}
