package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// write writes the run's files: report.md, summary.json, servers.csv,
// clients.csv, system.csv, timeline.csv and commands.txt.
func (s *state) write() error {
	f := s.figures()
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	path := s.Path

	sum := map[string]any{"figures": f, "config": s.configMap(), "environment": s.env, "notes": s.notes, "summed_checks": s.summed,
		"started": s.started, "commit": gitCommit()}
	var per []map[string]any
	for _, p := range s.servers {
		per = append(per, map[string]any{"index": p.part.index, "pid": p.srv.PID, "listen": p.srv.Listen, "admin": p.srv.Admin.URL,
			"users": p.part.users.String(), "idle": p.mem[readIdle], "ramped": p.mem[readRamped], "end": p.mem[readEnd], "stats": p.stats, "campaigns": p.camps,
			"ledger": p.checks, "exit_code": p.exitCode})
	}
	sum["servers"] = per
	if b, err := json.MarshalIndent(sum, "", "  "); err == nil {
		add(os.WriteFile(path("summary.json"), append(b, '\n'), 0o644))
	} else {
		add(err)
	}
	add(harness.WriteFile(path("servers.csv"), func(w io.Writer) {
		fmt.Fprintln(w, "index,pid,listen,admin,users,rss_idle,rss_ramped,rss_end,heap_idle,heap_ramped,heap_end,stacks_ramped,goroutines_ramped,metrics_scrape_ms_ramped,connections_max,logins,shake_requests,shake_got,shake_got_amount,shake_created_amount,shake_pool_amount,envelopes_created,envelopes_created_amount,opened,opened_amount,outstanding_amount,system_skipped,overload,ledger_ok,exit_code")
		for _, p := range s.servers {
			st := &p.stats
			fmt.Fprintf(w, "%d,%d,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.1f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%v,%d\n",
				p.part.index, p.srv.PID, p.srv.Listen, p.srv.Admin.URL, p.part.users, p.mem[readIdle].RSS, p.mem[readRamped].RSS, p.mem[readEnd].RSS,
				p.mem[readIdle].HeapInuse, p.mem[readRamped].HeapInuse, p.mem[readEnd].HeapInuse, p.mem[readRamped].StackInuse, p.mem[readRamped].Goroutines, float64(p.mem[readRamped].Scrape.Microseconds())/1e3,
				p.part.users.Len(), st.Logins, st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.CreatedAmount, st.Shake.PoolAmount,
				st.Envelopes.Created, st.Envelopes.CreatedAmount, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.OutstandingAmount,
				st.Envelopes.SystemSkipped, st.Shake.Overload+st.Envelopes.Overload, p.ok(), p.exitCode)
		}
	}))
	add(harness.WriteFile(path("clients.csv"), func(w io.Writer) {
		fmt.Fprintln(w, "index,pid,users,sources,connect_rate,rss_ramped,rss_end,heap_stacks_per_user,connects,shake_sent,shake_answered,shake_got,shake_p50_ms,shake_p99_ms,shake_p999_ms,shake_max_ms,open_sent,open_p99_ms,pushes,shake_amount,open_amount,errors,skipped,reconcile_ok,exit")
		for _, c := range s.clients {
			r := c.rep
			if r == nil {
				r = &loadclient.Report{}
			}
			q, o := reqOf(r, "SHAKE"), reqOf(r, "OPEN")
			var errsum uint64
			for _, e := range r.Errors {
				errsum += e
			}
			var hpu float64
			if r.Memory != nil {
				hpu = r.Memory.PerUser
			}
			exit := "0"
			if err := c.Wait(); err != nil {
				exit = strings.ReplaceAll(err.Error(), ",", ";")
			}
			fmt.Fprintf(w, "%d,%d,%s,%s,%d,%d,%d,%.0f,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%d,%.3f,%d,%d,%d,%d,%d,%v,%s\n",
				c.part.index, c.PID(), c.part.users, strings.ReplaceAll(joinAddrs(c.part.sources), ",", " "), c.part.connectRate,
				c.rss[readRamped], c.rss[readEnd], hpu, r.Connects, q.Sent, q.Answered, q.Status["1"],
				float64(q.Latency.P50)/1e6, float64(q.Latency.P99)/1e6, float64(q.Latency.P999)/1e6, float64(q.Latency.Max)/1e6,
				o.Sent, float64(o.Latency.P99)/1e6, r.Pushes["ENVELOPE"], r.ShakeAmount, r.OpenAmount, errsum, r.Skipped, harness.Reconciled(c.rep), exit)
		}
	}))
	if s.smp != nil {
		s.smp.mu.Lock()
		rows, stats := slices.Clone(s.smp.rows), slices.Clone(s.smp.stats)
		s.smp.mu.Unlock()
		add(harness.WriteFile(path("system.csv"), func(w io.Writer) {
			fmt.Fprintln(w, "t_s,phase,mem_available,slab,sreclaimable,sunreclaim,tcp_inuse,tcp_orphan,tcp_tw,tcp_mem_pages,conntrack,busy_cores,servers_rss,clients_rss,servers_alive,clients_alive")
			var prev *sysRow
			for i := range rows {
				r := &rows[i]
				cores := 0.0
				if prev != nil && r.T > prev.T {
					cores = (r.Sys.Busy - prev.Sys.Busy).Seconds() / (r.T - prev.T)
				}
				fmt.Fprintf(w, "%.1f,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%d,%d,%d,%d\n", r.T, r.Phase, r.Sys.MemAvailable, r.Sys.Slab, r.Sys.SReclaimable,
					r.Sys.SUnreclaim, r.Sys.TCP["inuse"], r.Sys.TCP["orphan"], r.Sys.TCP["tw"], r.Sys.TCP["mem"], r.Sys.Conntrack, cores,
					r.ServerRSS, r.ClientRSS, r.ServersAlive, r.ClientsAlive)
				prev = r
			}
		}))
		add(harness.WriteFile(path("timeline.csv"), func(w io.Writer) {
			fmt.Fprintln(w, "t_s,phase,connections,logins,new_conns_per_s,shake_per_s,got_per_s,group_envelopes_per_s,opened_per_s")
			for _, r := range stats {
				fmt.Fprintf(w, "%.1f,%s,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f\n", r.T, r.Phase, r.Conns, r.Logins, r.New, r.Shakes, r.Got, r.Created, r.Opened)
			}
		}))
	}
	add(s.WriteCommands())
	add(harness.WriteFile(path("report.md"), func(w io.Writer) { s.markdown(w, &f) }))
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	if len(out) > 0 {
		return fmt.Errorf("writing the report: %v", out)
	}
	return nil
}

func reqOf(r *loadclient.Report, kind string) *loadclient.RequestReport {
	if q := r.Requests[kind]; q != nil {
		return q
	}
	return &loadclient.RequestReport{Status: map[string]uint64{}}
}

func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func (s *state) configMap() map[string]any {
	c := &s.cfg
	return map[string]any{"conns": c.conns, "servers": c.servers, "qps": c.qps, "duration": c.duration.String(),
		"shake_rate": c.shakeRate, "send_rate": c.sendRate, "recipients": c.recipients, "ramp_rate": c.rampRate,
		"ramp_timeout": c.rampTimeout.String(), "hold": c.hold.String(), "source": c.source,
		"server_gomaxprocs": c.serverProcs, "client_gomaxprocs": c.clientProcs, "server_flags": c.serverFlags, "client_flags": c.clientFlags}
}

// summaryRows are the figures of the final table, as (figure, value) pairs.
func (s *state) summaryRows(f *figures) [][2]string {
	n := f.Conns
	verdict := "PASS"
	if !f.Passed {
		verdict = "FAIL"
	}
	rows := [][2]string{
		{"result", verdict},
		{"connections", fmt.Sprintf("%s over %d servers × ~%s, %d load clients", harness.Thousands(int64(n)), f.Servers, harness.Thousands(int64(n/max(f.Servers, 1))), f.Clients)},
		{"ramp", fmt.Sprintf("%.1f s from the launch of the load clients (%.1f s from the first connection), %s connects/s", f.RampSeconds, f.RampFromFirstSeconds, harness.Thousands(int64(f.RampRate)))},
		{"load", fmt.Sprintf("%.0f s at %s SHAKE/s target: sent %s/s, received %s/s (whole seconds %s–%s)", f.LoadSeconds, harness.Thousands(int64(f.TargetQPS)),
			harness.Thousands(int64(f.SentQPS+0.5)), harness.Thousands(int64(f.ServerQPS+0.5)), harness.Thousands(int64(f.SecondMin)), harness.Thousands(int64(f.SecondMax)))},
		{"SHAKE latency", fmt.Sprintf("p50 %s (clients %s–%s), p99 %s (clients %s–%s), p99.9 ≤ %s, max %s; %s SHAKEs",
			harness.Ms(f.Shakes.P50Median), harness.Ms(f.Shakes.P50Min), harness.Ms(f.Shakes.P50Max), harness.Ms(f.Shakes.P99Median), harness.Ms(f.Shakes.P99Min), harness.Ms(f.Shakes.P99Max),
			harness.Ms(f.Shakes.P999Max), harness.Ms(f.Shakes.Max), harness.Thousands(int64(f.Shakes.Count)))},
		{"OPEN latency", fmt.Sprintf("p50 %s, p99 %s (clients up to %s), max %s; %s OPENs", harness.Ms(f.Opens.P50Median), harness.Ms(f.Opens.P99Median), harness.Ms(f.Opens.P99Max), harness.Ms(f.Opens.Max), harness.Thousands(int64(f.Opens.Count)))},
		{"money", fmt.Sprintf("SHAKE %s got %s fen; group envelopes %s (%s fen), %s shares opened (%s fen), outstanding %s fen",
			harness.Thousands(f.ShakeGot), harness.Thousands(f.ShakeAmount), harness.Thousands(f.GroupCreated), harness.Thousands(f.GroupAmount), harness.Thousands(f.Opened), harness.Thousands(f.OpenedAmount), harness.Thousands(f.OutstandingFen))},
		{"reconciliation", fmt.Sprintf("%d/%d load clients with their server (strict), %d/%d server ledgers, summed %v", f.ReconciledOK, f.Clients, f.LedgersOK, f.Servers, okWord(f.SummedOK))},
		{"client errors", fmt.Sprintf("%d; SHAKEs skipped (not connected) %d", f.Errors, f.Skipped)},
		{"CPU", fmt.Sprintf("servers %.1f µs, load clients %.1f µs per SHAKE; machine %.2f of %d cores busy during the load (others' work included); holding the connections idle: servers %.2f, load clients %.2f cores",
			f.ServerCPUPerReq, f.ClientCPUPerReq, f.MachineCores, numCPU(), f.HoldServerCores, f.HoldClientCores)},
		{"server user space", fmt.Sprintf("RSS %s idle → %s ramped → %s at the end: %s/conn (Go heap+stacks %s/conn); at the end %s/conn",
			harness.MiB(f.ServerRSSIdle), harness.MiB(f.ServerRSSRamped), harness.MiB(f.ServerRSSEnd), bytesF(f.ServerRSSPerConn), bytesF(f.ServerHeapPerConn), bytesF(f.ServerRSSEndPerConn))},
		{"load-client user space", fmt.Sprintf("RSS %s ramped, %s at the end: %s/user with the runtimes (heap+stacks %s/user)", harness.MiB(f.ClientRSSRamped), harness.MiB(f.ClientRSSEnd), bytesF(f.ClientRSSPerUser), bytesF(f.ClientHeapPerUser))},
		{"kernel", fmt.Sprintf("Slab %s/conn (SUnreclaim %s; socket caches %s; TCP buffers %s) for both ends of each connection; at the end Slab %s/conn", bytesF(f.SlabPerConn), bytesF(f.SUnreclaimPerConn), bytesF(f.SocketCachesPerConn), bytesF(f.TCPMemPerConnRamped), bytesF(f.SlabEnd))},
		{"memory", fmt.Sprintf("peak %s used (MemAvailable %s → %s, in %s) of MemTotal %s: %s to spare", harness.GiB(f.PeakUsed), harness.GiB(f.MemAvailableStart), harness.GiB(f.MemAvailableLow), f.PeakPhase, harness.GiB(f.MemTotal), harness.GiB(f.MemAvailableLow))},
	}
	if f.Error != "" {
		rows = append(rows, [2]string{"error", firstLine(f.Error)})
	}
	return rows
}

// sourcesOf writes a part's source addresses: all of them when few.
func sourcesOf(p part) string {
	if len(p.sources) > 0 && len(p.sources) <= 4 {
		return strings.ReplaceAll(joinAddrs(p.sources), ",", ", ")
	}
	return addrSpan(p.sources)
}

// spread writes min / median / max of byte counts in MiB.
func spread(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return fmt.Sprintf("%s / %s / %s", harness.MiB(v[0]), harness.MiB(v[len(v)/2]), harness.MiB(v[len(v)-1]))
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISMATCH"
}

func bytesF(b float64) string {
	if b >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func numCPU() int { return runtime.NumCPU() }

// printSummary prints the final table.
func (s *state) printSummary() {
	f := s.figures()
	fmt.Fprintln(s.Stdout)
	tw := tabwriter.NewWriter(s.Stdout, 0, 0, 2, ' ', 0)
	for _, r := range s.summaryRows(&f) {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

// markdown writes report.md.
func (s *state) markdown(w io.Writer, f *figures) {
	cfg := &s.cfg
	fmt.Fprintf(w, "# million: %s connections on one host\n\n", harness.Thousands(int64(cfg.conns)))
	fmt.Fprintf(w, "Run of %s, commit %s, %d CPUs, MemTotal %s.\n\n", s.started.Format(time.RFC3339), gitCommit(), numCPU(), harness.GiB(s.sysStart.MemTotal))
	fmt.Fprintf(w, "```sh\n%s\n```\n\n", s.cmdline)
	fmt.Fprintln(w, "## Summary\n\n| figure | value |\n|---|---|")
	for _, r := range s.summaryRows(f) {
		fmt.Fprintf(w, "| %s | %s |\n", r[0], strings.ReplaceAll(r[1], "|", "\\|"))
	}
	fmt.Fprintln(w, "\n## Layout")
	if len(s.layout) > 0 {
		first, last := s.layout[0], s.layout[len(s.layout)-1]
		fmt.Fprintf(w, "\n- %d server processes (`bin/server %s`, GOMAXPROCS=%d), each on its own port 127.0.0.1:PORT with its own admin port (kernel-chosen), holding %s–%s connections.\n",
			cfg.servers, cfg.serverFlags, cfg.serverProcs, harness.Thousands(int64(last.users.Len())), harness.Thousands(int64(first.users.Len())))
		fmt.Fprintf(w, "- %d load-client processes (`bin/loadclient %s`, GOMAXPROCS=%d), one per server: users %s, %s, … %s, each with `-total-users %d` (one shared open-loop schedule) and `-connect-rate` %d–%d (%d in all).\n",
			cfg.servers, cfg.clientFlags, cfg.clientProcs, first.users, s.layout[min(1, len(s.layout)-1)].users, last.users, cfg.conns, last.connectRate, first.connectRate, cfg.rampRate)
		fmt.Fprintf(w, "- Source addresses: load client 0 binds %s, the last %s (IP_BIND_ADDRESS_NO_PORT: the local port is picked per destination, so each (source, server port) pair has the whole ephemeral range).\n", sourcesOf(first), sourcesOf(last))
		fmt.Fprintf(w, "- Campaigns per server: shake %d–%d/s (%d in all), send %d–%d/s × %d recipients (%d in all), for %v from the second the load starts.\n",
			last.shakeRate, first.shakeRate, cfg.shakeRate, last.sendRate, first.sendRate, cfg.recipients, cfg.sendRate, cfg.duration)
	}
	fmt.Fprintln(w, "\nEvery command is in `commands.txt`.\n\n## Settings read (none changed)\n\n| setting | value |\n|---|---|")
	keys := make([]string, 0, len(s.env))
	for k := range s.env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "| %s | %s |\n", k, s.env[k])
	}
	fmt.Fprintln(w, "\n## Reconciliation\n\nEach load client reconciled strictly with its own server's `/stats` (SHAKE amounts and count, OPEN amounts and count, every ENVELOPE push opened once). Each server's ledger was then checked, and the sums:")
	fmt.Fprintln(w)
	var bad []string
	for _, p := range s.servers {
		if !p.ok() {
			bad = append(bad, fmt.Sprintf("server %d", p.part.index))
		}
	}
	for _, c := range s.clients {
		if !harness.Reconciled(c.rep) {
			bad = append(bad, fmt.Sprintf("load client %d", c.part.index))
		}
	}
	if len(bad) == 0 && len(s.servers) > 0 && len(s.summed) > 0 {
		fmt.Fprintf(w, "- all %d load clients reconciled ok with their servers; all %d server ledgers hold (per server in `servers.csv`, `clients.csv`, `summary.json`).\n", len(s.clients), len(s.servers))
	} else {
		fmt.Fprintf(w, "- failed or missing: %s\n", strings.Join(bad, ", "))
	}
	for _, c := range s.summed {
		fmt.Fprintf(w, "- %s\n", c)
	}
	if len(s.servers) > 0 && len(s.servers) == len(s.clients) {
		fmt.Fprintln(w, "\n| server | users | SHAKE got (server) | fen (server) | fen (client) | shares opened | fen (server) | fen (client) | ledger | client reconciled |\n|--:|---|--:|--:|--:|--:|--:|--:|---|---|")
		for i, p := range s.servers {
			c, st := s.clients[i], &p.stats
			var cs, co uint64
			if c.rep != nil {
				cs, co = c.rep.ShakeAmount, c.rep.OpenAmount
			}
			fmt.Fprintf(w, "| %d | %s | %d | %d | %d | %d | %d | %d | %s | %s |\n", i, p.part.users, st.Shake.Got, st.Shake.GotAmount, cs,
				st.Envelopes.Opened, st.Envelopes.OpenedAmount, co, okWord(p.ok()), okWord(harness.Reconciled(c.rep)))
		}
	}
	fmt.Fprintln(w, "\n## Memory\n\nRead idle before the ramp, after the ramp (connections up and idle, after -hold) and at the end of the load (connections still up). The kernel is read first each time: the servers' `/metrics` scrape lists `/proc/PID/fd` and so grows the dentry and proc inode caches (SReclaimable), which is why the kernel figure per connection comes from the after-ramp reading. On loopback both sockets of a connection are in this kernel, so the kernel's figure counts two sockets.\n\n| reading | servers RSS | servers Go heap+stacks | load clients RSS | Slab | SUnreclaim | TCP mem (pages) | MemAvailable |\n|---|--:|--:|--:|--:|--:|--:|--:|")
	row := func(name string, at int) {
		a, b, c := s.memory(at)
		sys := s.sys[at]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %s |\n", name, harness.MiB(a), harness.MiB(b), harness.MiB(c), harness.GiB(sys.Slab), harness.GiB(sys.SUnreclaim), sys.TCP["mem"], harness.GiB(sys.MemAvailable))
	}
	fmt.Fprintf(w, "| start | – | – | – | %s | %s | %d | %s |\n", harness.GiB(s.sysStart.Slab), harness.GiB(s.sysStart.SUnreclaim), s.sysStart.TCP["mem"], harness.GiB(s.sysStart.MemAvailable))
	for at, name := range []string{"servers idle", "after the ramp", "end of the load"} {
		if !s.sys[at].At.IsZero() {
			row(name, at)
		}
	}
	if !s.sys[readRamped].At.IsZero() {
		var srv, cli []int64
		for _, p := range s.servers {
			srv = append(srv, p.mem[readRamped].RSS)
		}
		for _, c := range s.clients {
			cli = append(cli, c.rss[readRamped])
		}
		fmt.Fprintf(w, "\nPer process after the ramp (VmRSS): servers %s, load clients %s (min / median / max; every process in `servers.csv` and `clients.csv`).\n", spread(srv), spread(cli))
	}
	if s.smp != nil {
		fmt.Fprintf(w, "\nPeak: MemAvailable fell to %s (in phase %s), %s below the start; the servers together peaked at %s RSS and the load clients at %s.\n",
			harness.GiB(f.MemAvailableLow), f.PeakPhase, harness.GiB(f.PeakUsed), harness.MiB(s.smp.peakSrv), harness.MiB(s.smp.peakCli))
	}
	if d := harness.TopCaches(s.sys[readIdle], s.sys[readRamped], 8); len(d) > 0 && !s.sys[readRamped].At.IsZero() {
		fmt.Fprintln(w, "\nSlab caches that grew most over the ramp (`/proc/slabinfo`):\n\n| cache | growth | per connection |\n|---|--:|--:|")
		for _, c := range d {
			fmt.Fprintf(w, "| %s | %s | %s |\n", c.Name, harness.MiB(c.Bytes), harness.Per(c.Bytes, cfg.conns))
		}
	}
	if len(s.notes) > 0 {
		fmt.Fprintln(w, "\n## Notes")
		for _, n := range s.notes {
			fmt.Fprintf(w, "\n- %s", n)
		}
		fmt.Fprintln(w)
	}
	if s.err != nil {
		fmt.Fprintf(w, "\n## Error\n\n```\n%v\n```\n", s.err)
	}
	fmt.Fprint(w, "\n## Files\n\n`summary.json` (every figure, per server), `servers.csv`, `clients.csv` (per process), `system.csv` (the machine each second: MemAvailable, Slab, sockstat, busy cores, RSS sums), `timeline.csv` (the servers' /stats each second), `commands.txt`, `server-NN.log`, `client-NN.log`, `client-NN.report.json`, `client-NN.timeline.csv`.\n")
}
