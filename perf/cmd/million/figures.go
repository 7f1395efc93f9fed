package main

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// summary is the run's figures: each row of the final table (printed, and
// at the head of report.md) says some, which summary.json holds by name.
type summary struct {
	harness.Table
	figures          map[string]any
	peakSrv, peakCli int64 // RSS, all servers and all load clients at once
}

// add adds a row; kv are the figures it says, name then value.
func (m *summary) add(name, text string, kv ...any) {
	m.Add(name, text)
	for i := 0; i+1 < len(kv); i += 2 {
		m.figures[kv[i].(string)] = kv[i+1]
	}
}

// latencies is one request kind over the load clients: its quantiles over
// every request, merged from the clients' histograms (loadclient.MergeLatency),
// and the spread of the clients' own p99s, median, min and max.
type latencies struct {
	loadclient.LatencyReport
	ClientP99 [3]int64 `json:"client_p99_ns"`
}

func aggregate(ps []*pair, kind string) (l latencies, err error) {
	var all []loadclient.LatencyReport
	var p99 []int64
	for _, p := range ps {
		if p.rep == nil || p.rep.Requests[kind] == nil || p.rep.Requests[kind].Latency.Count == 0 {
			continue
		}
		r := p.rep.Requests[kind].Latency
		all, p99 = append(all, r), append(p99, r.P99)
	}
	if len(all) == 0 {
		return l, nil
	}
	if l.LatencyReport, err = loadclient.MergeLatency(all); err != nil {
		return l, fmt.Errorf("%s latencies: %w", kind, err)
	}
	l.Buckets = nil // the clients' report.json keep them
	slices.Sort(p99)
	l.ClientP99 = [3]int64{p99[len(p99)/2], p99[0], p99[len(p99)-1]}
	return l, nil
}

// summary computes the figures. Per connection is (ramped − idle) / conns;
// the kernel's figures count both ends of each connection.
func (s *state) summary(rows []sysRow) *summary {
	th, b, ms, mib, gib := harness.Thousands, bytesF, harness.Ms, harness.MiB, harness.GiB
	n := s.cfg.conns
	per := func(d int64) float64 { return float64(d) / float64(n) }
	m := &summary{Table: harness.Table{Head: []string{"figure", "value"}}, figures: map[string]any{}}
	m.add("result", map[bool]string{true: "PASS", false: "FAIL"}[s.passed], "passed", s.passed)
	clients := 0
	for _, p := range s.pairs {
		if p.cli != nil {
			clients++
		}
	}
	m.add("connections", fmt.Sprintf("%s over %d servers × ~%s, %d load clients", th(int64(n)), len(s.pairs), th(int64(n/max(len(s.pairs), 1))), clients),
		"connections", n, "servers", len(s.pairs), "load_clients", clients)

	var ramp, rampFirst, rampRate float64
	if !s.rampDone.IsZero() {
		ramp, rampFirst = s.rampDone.Sub(s.launched).Seconds(), s.rampDone.Sub(s.firstUp).Seconds()
		rampRate = float64(n) / ramp
	}
	m.add("ramp", fmt.Sprintf("%.1f s from the launch of the load clients (%.1f s from the first connection), %s connects/s", ramp, rampFirst, th(int64(rampRate))),
		"ramp_s", ramp, "ramp_from_first_conn_s", rampFirst, "ramp_connects_per_s", rampRate)

	var secs, sent, recv, lo, hi, srvCPU, cliCPU, busy float64
	if !s.loadStart.IsZero() && !s.stats1.at.IsZero() {
		secs = s.loadEnd.Sub(s.loadStart).Seconds()
		shakes := float64(s.stats1.Requests - s.stats0.Requests)
		recv, sent = shakes/secs, float64(s.cliTotals.Requests)/secs
		if len(s.perSecond) > 0 {
			lo, hi = slices.Min(s.perSecond), slices.Max(s.perSecond)
		}
		if shakes > 0 {
			srvCPU = float64((s.load1.servers - s.load0.servers).Microseconds()) / shakes
			cliCPU = float64((s.load1.clients - s.load0.clients).Microseconds()) / shakes
		}
		_, _, busy = cores(s.load0, s.load1)
	}
	m.add("load", fmt.Sprintf("%.0f s at %s SHAKE/s target: sent %s/s, received %s/s (whole seconds %s–%s)", secs, th(int64(s.cfg.qps)), th(int64(sent+0.5)), th(int64(recv+0.5)), th(int64(lo)), th(int64(hi))),
		"load_s", secs, "target_qps", s.cfg.qps, "shake_sent_per_s", sent, "shake_received_per_s", recv, "shake_per_s_min", lo, "shake_per_s_max", hi)
	sh, errSh := aggregate(s.pairs, "SHAKE")
	op, errOp := aggregate(s.pairs, "OPEN")
	if err := errors.Join(errSh, errOp); err != nil {
		m.add("latency", "not merged: "+err.Error())
	}
	m.add("SHAKE latency", fmt.Sprintf("over every SHAKE: p50 %s, p99 %s, p99.9 %s, max %s (the clients' p99 %s–%s, median %s); %s SHAKEs",
		ms(sh.P50), ms(sh.P99), ms(sh.P999), ms(sh.Max), ms(sh.ClientP99[1]), ms(sh.ClientP99[2]), ms(sh.ClientP99[0]), th(int64(sh.Count))), "shake_latency", sh)
	m.add("OPEN latency", fmt.Sprintf("over every OPEN: p50 %s, p99 %s, max %s (the clients' p99 up to %s); %s OPENs", ms(op.P50), ms(op.P99), ms(op.Max), ms(op.ClientP99[2]), th(int64(op.Count))), "open_latency", op)

	t := s.srvTotals
	m.add("money", fmt.Sprintf("SHAKE %s got %s fen; group envelopes %s (%s fen), %s shares opened (%s fen), outstanding %s fen",
		th(t.ShakeGot), th(t.ShakeAmount), th(t.Created), th(t.CreatedAmount), th(t.Opened), th(t.OpenAmount), th(t.Outstanding)), "servers_summed", t)
	var errs, skipped, cheap, cusers uint64
	var reconciled, ledgers int
	var srvRSS, heap, cliRSS [3]int64
	for _, p := range s.pairs {
		if r := p.rep; r != nil {
			for _, e := range r.Errors {
				errs += e
			}
			skipped += r.Skipped
			if harness.Reconciled(r) {
				reconciled++
			}
			if r.Memory != nil {
				cheap += r.Memory.HeapInuse + r.Memory.StackInuse
				cusers += uint64(r.Memory.Users)
			}
		}
		if p.ok() {
			ledgers++
		}
		for at := range srvRSS {
			srvRSS[at] += p.mem[at].RSS
			heap[at] += p.mem[at].HeapStacks()
			cliRSS[at] += p.rss[at]
		}
	}
	summed := len(s.summed) > 0 && len(harness.FailedChecks(s.summed)) == 0
	m.add("reconciliation", fmt.Sprintf("%d/%d load clients with their server (strict), %d/%d server ledgers, summed %v", reconciled, clients, ledgers, len(s.pairs), okWord(summed)),
		"clients_reconciled_ok", reconciled, "server_ledgers_ok", ledgers, "summed_ok", summed)
	m.add("client errors", fmt.Sprintf("%d; SHAKEs skipped (not connected) %d", errs, skipped), "client_errors", errs, "skipped_not_connected", skipped)
	hs, hc, hm := cores(s.hold0, s.hold1)
	m.add("CPU", fmt.Sprintf("servers %.1f µs, load clients %.1f µs per SHAKE; machine %.2f of %d cores busy during the load (others' work included); holding the connections idle: servers %.2f, load clients %.2f cores",
		srvCPU, cliCPU, busy, runtime.NumCPU(), hs, hc), "server_cpu_us_per_shake", srvCPU, "client_cpu_us_per_shake", cliCPU,
		"machine_busy_cores_during_load", busy, "hold_server_cores", hs, "hold_client_cores", hc, "hold_machine_cores", hm)

	var rssPer, heapPer, rssEndPer, slab, unrecl, socks, tcp, slabEnd, readAfter float64
	idle, ramped, end := s.sys[readIdle], s.sys[readRamped], s.sys[readEnd]
	if srvRSS[readRamped] > 0 {
		rssPer, heapPer = per(srvRSS[readRamped]-srvRSS[readIdle]), per(heap[readRamped]-heap[readIdle])
		slab, unrecl = per(ramped.Slab-idle.Slab), per(ramped.SUnreclaim-idle.SUnreclaim)
		if d, ok := harness.SocketSlab(idle, ramped); ok {
			socks = per(d)
		}
		tcp = per((ramped.TCP["mem"] - idle.TCP["mem"]) * 4096)
		readAfter = ramped.At.Sub(s.rampDone).Seconds()
	}
	if srvRSS[readEnd] > 0 {
		rssEndPer, slabEnd = per(srvRSS[readEnd]-srvRSS[readIdle]), per(end.Slab-idle.Slab)
	}
	m.add("server user space", fmt.Sprintf("RSS %s idle → %s ramped → %s at the end: %s/conn (Go heap+stacks %s/conn); at the end %s/conn",
		mib(srvRSS[0]), mib(srvRSS[1]), mib(srvRSS[2]), b(rssPer), b(heapPer), b(rssEndPer)),
		"server_rss", srvRSS, "server_rss_per_conn", rssPer, "server_heap_stacks_per_conn", heapPer, "server_rss_end_per_conn", rssEndPer)
	cliPer := per(cliRSS[readRamped])
	var cliHeap float64
	if cusers > 0 {
		cliHeap = float64(cheap) / float64(cusers)
	}
	m.add("load-client user space", fmt.Sprintf("RSS %s ramped, %s at the end: %s/user with the runtimes (heap+stacks %s/user)", mib(cliRSS[1]), mib(cliRSS[2]), b(cliPer), b(cliHeap)),
		"client_rss", cliRSS, "client_rss_per_user", cliPer, "client_heap_stacks_per_user", cliHeap)
	var conntrack, tcpPeak int64
	low, peakPhase := s.sysStart.MemAvailable, ""
	for _, r := range rows {
		if r.Sys.MemAvailable < low {
			low, peakPhase = r.Sys.MemAvailable, r.Phase
		}
		conntrack, tcpPeak = max(conntrack, r.Sys.Conntrack), max(tcpPeak, r.Sys.TCP["mem"])
		m.peakSrv, m.peakCli = max(m.peakSrv, r.ServerRSS), max(m.peakCli, r.ClientRSS)
	}
	m.add("kernel", fmt.Sprintf("Slab %s/conn (SUnreclaim %s; socket caches %s; TCP buffers %s) for both ends of each connection; at the end Slab %s/conn", b(slab), b(unrecl), b(socks), b(tcp), b(slabEnd)),
		"kernel_slab_per_conn", slab, "kernel_sunreclaim_per_conn", unrecl, "kernel_socket_caches_per_conn", socks, "kernel_tcp_buffers_per_conn", tcp,
		"kernel_slab_per_conn_at_the_end", slabEnd, "kernel_tcp_mem_peak_pages", tcpPeak, "conntrack_peak", conntrack,
		"tcp_sockets_in_use_after_ramp", ramped.TCP["inuse"], "memory_read_after_ramp_s", readAfter)
	start := s.sysStart
	m.add("memory", fmt.Sprintf("peak %s used (MemAvailable %s → %s, in %s) of MemTotal %s: %s to spare", gib(start.MemAvailable-low), gib(start.MemAvailable), gib(low), peakPhase, gib(start.MemTotal), gib(low)),
		"mem_total", start.MemTotal, "mem_available_start", start.MemAvailable, "mem_available_low", low, "peak_used", start.MemAvailable-low, "peak_phase", peakPhase)
	if s.err != nil {
		first, _, _ := strings.Cut(s.err.Error(), "\n")
		m.add("error", first, "error", s.err.Error())
	}
	return m
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISMATCH"
}

// bytesF formats a size per connection: KiB from 10 KiB.
func bytesF(b float64) string {
	if b >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}
