package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// drainTime bounds the wait for the PONGs of the last PINGs after the window.
const drainTime = 2 * time.Second

// result is one mode's run.
type result struct {
	mode                   string
	conns, inflight, loops int
	window                 time.Duration
	pongs                  uint64 // in the window
	hist                   *loadclient.LatencyHistogram
	server, client, busy   time.Duration // CPU over the window; busy: the whole machine
	sent, answered         uint64
}

func run(ctx context.Context, cfg config) error {
	run, err := harness.NewRun(cfg.out, "pingbench-", "pingbench", os.Stdout, os.Stderr)
	if err != nil {
		return err
	}
	dir := run.Dir
	runs := map[string][]result{}
	for i := range cfg.count {
		for _, mode := range cfg.modes {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := bench(ctx, cfg, run, mode, fmt.Sprintf("server-%s-%d.log", mode, i+1))
			if err != nil {
				return fmt.Errorf("-ingress %s, run %d: %w", mode, i+1, err)
			}
			runs[mode] = append(runs[mode], r)
		}
	}
	var results []summary
	for _, mode := range cfg.modes {
		results = append(results, summarize(runs[mode]))
	}
	f, err := os.Create(filepath.Join(dir, "pingbench.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := io.MultiWriter(os.Stdout, f)
	fmt.Fprintf(w, "\nCommand: pingbench %s\n\n", strings.Join(os.Args[1:], " "))
	writeTable(w, results)
	fmt.Printf("\npingbench: table and server logs in %s/\n", dir)
	return run.WriteCommands()
}

// bench runs one server with -ingress mode through the closed PING loop.
func bench(ctx context.Context, cfg config, run *harness.Run, mode, log string) (r result, err error) {
	r = result{mode: mode, conns: cfg.conns, inflight: cfg.inflight, loops: cfg.loops, window: cfg.duration,
		hist: new(loadclient.LatencyHistogram)}
	srv, err := run.StartServer(ctx, log, harness.ServerConfig{
		Bin: filepath.Join(cfg.bin, "server"), Args: append([]string{"-ingress", mode}, strings.Fields(cfg.server)...),
	})
	if err != nil {
		return r, err
	}
	defer srv.Kill()
	d := &harness.Dialer{Server: netip.MustParseAddrPort(srv.Listen), Sources: cfg.sources, Timeout: 10 * time.Second}
	fds, err := d.LoginMany(1, cfg.conns, 4, nil)
	if err != nil {
		return r, err
	}
	defer harness.CloseAll(fds)
	if _, err := srv.Admin.WaitConnections(int64(cfg.conns), true, 30*time.Second); err != nil {
		return r, err
	}
	fmt.Printf("pingbench: -ingress %s: server pid %d, %d connections × %d PINGs in flight, %d client loop(s), %v warm-up + %v\n",
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
		lo, hi := i*len(fds)/cfg.loops, (i+1)*len(fds)/cfg.loops
		l, err := newLoop(fds[lo:hi], cfg.inflight)
		if err != nil {
			return r, err
		}
		l.startNs, l.winStart, l.winEnd = start.UnixNano(), winStart.UnixNano(), winEnd.UnixNano()
		l.drainEnd = winEnd.Add(drainTime).UnixNano()
		loops = append(loops, l)
	}
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); l.run() }()
	}

	// CPU over the window, read at its edges.
	type snap struct{ server, client, busy time.Duration }
	read := func() (s snap, err error) {
		if s.server, err = harness.CPUTime(srv.PID); err != nil {
			return s, err
		}
		s.client = harness.SelfCPUTime()
		s.busy, err = harness.MachineBusy()
		return s, err
	}
	time.Sleep(time.Until(winStart))
	s0, err0 := read()
	time.Sleep(time.Until(winEnd))
	s1, err1 := read()
	wg.Wait() // bounded: every loop returns by its drainEnd
	if err := errors.Join(err0, err1); err != nil {
		return r, err
	}
	r.server, r.client, r.busy = s1.server-s0.server, s1.client-s0.client, s1.busy-s0.busy
	var errs []error
	for _, l := range loops {
		r.pongs += l.inWindow
		r.hist.Merge(l.hist)
		r.sent += l.sent
		r.answered += l.answered
		errs = append(errs, l.err)
	}
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	if r.sent != r.answered {
		return r, fmt.Errorf("%d PINGs sent, %d PONGs read %v after the window", r.sent, r.answered, drainTime)
	}
	fmt.Printf("pingbench:   %.0f round trips/s, p50 %s, p99 %s; %d PINGs, every one answered\n",
		r.rate(), ms(r.hist.Quantile(0.5)), ms(r.hist.Quantile(0.99)), r.sent)
	harness.CloseAll(fds)
	if _, err := srv.Admin.WaitConnections(0, false, 30*time.Second); err != nil {
		return r, fmt.Errorf("after closing: %w", err)
	}
	code, err := srv.Stop(30 * time.Second)
	fmt.Printf("pingbench:   server: SIGTERM, exit status %d\n", code)
	return r, err
}

func ms(ns int64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }

// cores is CPU time over the window, in cores busy.
func cores(cpu, window time.Duration) string {
	return fmt.Sprintf("%.2f", cpu.Seconds()/window.Seconds())
}

// summary is a mode's median run, by round trips a second, and the range.
type summary struct {
	result
	runs       int
	minR, maxR float64
}

func (r *result) rate() float64 { return float64(r.pongs) / r.window.Seconds() }

func summarize(rs []result) summary {
	sort.Slice(rs, func(i, j int) bool { return rs[i].rate() < rs[j].rate() })
	return summary{result: rs[(len(rs)-1)/2], runs: len(rs), minR: rs[0].rate(), maxR: rs[len(rs)-1].rate()}
}

func writeTable(w io.Writer, rs []summary) {
	t := &harness.Table{Right: true, Head: []string{"ingress", "conns × in flight", "round trips/s (median of runs)", "range", "p50", "p99", "p99.9", "max",
		"server CPU (cores)", "client CPU (cores)", "rest of machine (cores)", "server CPU per round trip"}}
	for _, r := range rs {
		rest := max(r.busy-r.server-r.client, 0)
		t.Add(r.mode, fmt.Sprintf("%d × %d", r.conns, r.inflight), fmt.Sprintf("%.0f", r.rate()), fmt.Sprintf("%.0f–%.0f (%d runs)", r.minR, r.maxR, r.runs),
			ms(r.hist.Quantile(0.5)), ms(r.hist.Quantile(0.99)), ms(r.hist.Quantile(0.999)), ms(r.hist.Max()),
			cores(r.server, r.window), cores(r.client, r.window), cores(rest, r.window),
			fmt.Sprintf("%.2f µs", float64(r.server.Microseconds())/max(float64(r.pongs), 1)))
	}
	io.WriteString(w, t.Markdown())
	fmt.Fprintf(w, "\nLatencies and CPU are the median run's. CPU from /proc/PID/stat (server) and getrusage (client, %d epoll loop(s)) over the %v window; the machine has %d cores shared with everything else (rest of machine = /proc/stat busy − server − client).\n",
		rs[0].loops, rs[0].window, runtime.NumCPU())
}
