package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// write writes the run's files (report.md, summary.json, servers.csv,
// clients.csv, system.csv, timeline.csv, commands.txt) and prints the
// summary.
func (s *state) write() error {
	var rows []sysRow
	if s.smp != nil {
		rows = s.smp.stop()
	}
	m := s.summary(rows)
	c := &s.cfg
	config := map[string]any{"conns": c.conns, "servers": c.servers, "qps": c.qps, "duration": c.duration.String(),
		"shake_rate": c.shakeRate, "send_rate": c.sendRate, "recipients": c.recipients, "ramp_rate": c.rampRate,
		"ramp_timeout": c.rampTimeout.String(), "hold": c.hold.String(), "source": c.source,
		"server_gomaxprocs": c.serverProcs, "client_gomaxprocs": c.clientProcs, "server_flags": c.serverFlags, "client_flags": c.clientFlags}
	var per []map[string]any
	var srvCSV, cliCSV strings.Builder
	srvCSV.WriteString("index,pid,listen,admin,users,rss_idle,rss_ramped,rss_end,heap_idle,heap_ramped,heap_end,stacks_ramped,goroutines_ramped,metrics_scrape_ms_ramped,connections_max,logins,shake_requests,shake_got,shake_got_amount,shake_created_amount,shake_pool_amount,envelopes_created,envelopes_created_amount,opened,opened_amount,outstanding_amount,system_skipped,overload,ledger_ok,exit_code\n")
	cliCSV.WriteString("index,pid,users,sources,connect_rate,rss_ramped,rss_end,heap_stacks_per_user,connects,shake_sent,shake_answered,shake_got,shake_p50_ms,shake_p99_ms,shake_p999_ms,shake_max_ms,open_sent,open_p99_ms,pushes,shake_amount,open_amount,errors,skipped,reconcile_ok,exit\n")
	for _, p := range s.pairs {
		st, m := &p.stats, &p.mem
		per = append(per, map[string]any{"index": p.index, "pid": p.srv.PID, "listen": p.srv.Listen, "admin": p.srv.Admin.URL, "users": p.users.String(),
			"idle": m[readIdle], "ramped": m[readRamped], "end": m[readEnd], "stats": p.stats, "campaigns": p.camps, "ledger": p.checks, "exit_code": p.exitCode})
		fmt.Fprintf(&srvCSV, "%d,%d,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.1f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%v,%d\n",
			p.index, p.srv.PID, p.srv.Listen, p.srv.Admin.URL, p.users, m[readIdle].RSS, m[readRamped].RSS, m[readEnd].RSS,
			m[readIdle].HeapInuse, m[readRamped].HeapInuse, m[readEnd].HeapInuse, m[readRamped].StackInuse, m[readRamped].Goroutines, harness.Millis(m[readRamped].Scrape),
			p.users.Len(), st.Logins, st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.CreatedAmount, st.Shake.PoolAmount,
			st.Envelopes.Created, st.Envelopes.CreatedAmount, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.OutstandingAmount,
			st.Envelopes.SystemSkipped, st.Shake.Overload+st.Envelopes.Overload, p.ok(), p.exitCode)
		if p.cli == nil {
			continue
		}
		r := p.rep
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
		if err := p.cli.Wait(); err != nil {
			exit = strings.ReplaceAll(err.Error(), ",", ";")
		}
		ms := func(ns int64) float64 { return float64(ns) / 1e6 }
		fmt.Fprintf(&cliCSV, "%d,%d,%s,%s,%d,%d,%d,%.0f,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%d,%.3f,%d,%d,%d,%d,%d,%v,%s\n",
			p.index, p.cli.PID(), p.users, joinAddrs(p.sources, " "), p.connectRate, p.rss[readRamped], p.rss[readEnd], hpu, r.Connects, q.Sent, q.Answered, q.Status["1"],
			ms(q.Latency.P50), ms(q.Latency.P99), ms(q.Latency.P999), ms(q.Latency.Max), o.Sent, ms(o.Latency.P99), r.Pushes["ENVELOPE"],
			r.ShakeAmount, r.OpenAmount, errsum, r.Skipped, harness.Reconciled(p.rep), exit)
	}
	sum, err := json.MarshalIndent(map[string]any{"figures": m.figures, "config": config, "environment": s.env, "notes": s.notes, "summed_checks": s.summed,
		"started": s.started, "commit": gitCommit(), "servers": per}, "", "  ")
	errs := []error{err, os.WriteFile(s.Path("summary.json"), append(sum, '\n'), 0o644),
		os.WriteFile(s.Path("servers.csv"), []byte(srvCSV.String()), 0o644), os.WriteFile(s.Path("clients.csv"), []byte(cliCSV.String()), 0o644)}
	if s.smp != nil {
		errs = append(errs, harness.WriteFile(s.Path("system.csv"), func(w io.Writer) {
			fmt.Fprintln(w, "t_s,phase,mem_available,slab,sreclaimable,sunreclaim,tcp_inuse,tcp_orphan,tcp_tw,tcp_mem_pages,conntrack,busy_cores,servers_rss,clients_rss,servers_alive,clients_alive")
			for i, r := range rows {
				cores := 0.0
				if i > 0 && r.T > rows[i-1].T {
					cores = (r.Sys.Busy - rows[i-1].Sys.Busy).Seconds() / (r.T - rows[i-1].T)
				}
				fmt.Fprintf(w, "%.1f,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.2f,%d,%d,%d,%d\n", r.T, r.Phase, r.Sys.MemAvailable, r.Sys.Slab, r.Sys.SReclaimable,
					r.Sys.SUnreclaim, r.Sys.TCP["inuse"], r.Sys.TCP["orphan"], r.Sys.TCP["tw"], r.Sys.TCP["mem"], r.Sys.Conntrack, cores,
					r.ServerRSS, r.ClientRSS, r.ServersAlive, r.ClientsAlive)
			}
		}), harness.WriteFile(s.Path("timeline.csv"), func(w io.Writer) {
			fmt.Fprintln(w, "t_s,phase,connections,logins,new_conns_per_s,shake_per_s,got_per_s,group_envelopes_per_s,opened_per_s")
			for _, r := range s.timeline {
				fmt.Fprintf(w, "%.1f,%s,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f\n", r.T, r.Phase, r.Conns, r.Logins, r.New, r.Shakes, r.Got, r.Created, r.Opened)
			}
		}))
	}
	fmt.Fprintf(s.Stdout, "\n%s", m.Text())
	errs = append(errs, s.WriteCommands(), os.WriteFile(s.Path("report.md"), []byte(s.doc(m).Markdown()), 0o644))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("writing the report: %w", err)
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

// doc is report.md.
func (s *state) doc(m *summary) harness.Doc {
	cfg, th, mib, gib := &s.cfg, harness.Thousands, harness.MiB, harness.GiB
	d := harness.Doc{harness.H1(fmt.Sprintf("million: %s connections on one host", th(int64(cfg.conns)))),
		harness.Para(fmt.Sprintf("Run of %s, commit %s, %d CPUs, MemTotal %s.", s.started.Format(time.RFC3339), gitCommit(), runtime.NumCPU(), gib(s.sysStart.MemTotal))),
		harness.Code(strings.Join(append([]string{"go run ./perf/cmd/million"}, os.Args[1:]...), " ")),
		harness.H2("Summary"), &m.Table, harness.H2("Layout")}
	if len(s.layout) > 0 {
		first, last := s.layout[0], s.layout[len(s.layout)-1]
		d = append(d, harness.Para(fmt.Sprintf("%d server processes (`bin/server %s`, GOMAXPROCS=%d), each on its own port 127.0.0.1:PORT with its own admin port (kernel-chosen), holding %s–%s connections.",
			cfg.servers, cfg.serverFlags, cfg.serverProcs, th(int64(last.users.Len())), th(int64(first.users.Len())))),
			harness.Para(fmt.Sprintf("%d load-client processes (`bin/loadclient %s`, GOMAXPROCS=%d), one per server: users %s, %s, … %s, each with `-total-users %d` (one shared open-loop schedule) and `-connect-rate` %d–%d (%d in all).",
				cfg.servers, cfg.clientFlags, cfg.clientProcs, first.users, s.layout[min(1, len(s.layout)-1)].users, last.users, cfg.conns, last.connectRate, first.connectRate, cfg.rampRate)),
			harness.Para(fmt.Sprintf("Source addresses: load client 0 binds %s, the last %s (IP_BIND_ADDRESS_NO_PORT: the local port is picked per destination, so each (source, server port) pair has the whole ephemeral range).", addrSpan(first.sources), addrSpan(last.sources))),
			harness.Para(fmt.Sprintf("Campaigns per server: shake %d–%d/s (%d in all), send %d–%d/s × %d recipients (%d in all), for %v from the second the load starts.",
				last.shakeRate, first.shakeRate, cfg.shakeRate, last.sendRate, first.sendRate, cfg.recipients, cfg.sendRate, cfg.duration)))
	}
	env := &harness.Table{Head: []string{"setting", "value"}}
	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		env.Add(k, s.env[k])
	}
	d = append(d, harness.Para("Every command is in `commands.txt`."), harness.H2("Settings read (none changed)"), env, harness.H2("Reconciliation"),
		harness.Para("Each load client reconciled strictly with its own server's `/stats` (SHAKE amounts and count, OPEN amounts and count, every ENVELOPE push opened once). Each server's ledger was then checked, and the sums:"))
	var bad []string
	var srvRSS, cliRSS []int64
	t := &harness.Table{Right: true, Head: []string{"server", "users", "SHAKE got (server)", "fen (server)", "fen (client)", "shares opened", "fen (server)", "fen (client)", "ledger", "client reconciled"}}
	for _, p := range s.pairs {
		if !p.ok() {
			bad = append(bad, fmt.Sprintf("server %d", p.index))
		}
		if !harness.Reconciled(p.rep) {
			bad = append(bad, fmt.Sprintf("load client %d", p.index))
		}
		srvRSS, cliRSS = append(srvRSS, p.mem[readRamped].RSS), append(cliRSS, p.rss[readRamped])
		var cs, co uint64
		if p.rep != nil {
			cs, co = p.rep.ShakeAmount, p.rep.OpenAmount
		}
		st := &p.stats
		t.Add(fmt.Sprint(p.index), p.users.String(), fmt.Sprint(st.Shake.Got), fmt.Sprint(st.Shake.GotAmount), fmt.Sprint(cs),
			fmt.Sprint(st.Envelopes.Opened), fmt.Sprint(st.Envelopes.OpenedAmount), fmt.Sprint(co), okWord(p.ok()), okWord(harness.Reconciled(p.rep)))
	}
	checks := &harness.Table{Head: []string{"check", "clients", "servers", ""}, Right: true}
	for _, c := range s.summed {
		checks.Add(c.Name, fmt.Sprint(c.Left), fmt.Sprint(c.Right), okWord(c.OK()))
	}
	if len(bad) == 0 && len(s.summed) > 0 {
		d = append(d, harness.Para(fmt.Sprintf("All %d load clients reconciled ok with their servers; all %[1]d server ledgers hold (per server in `servers.csv`, `clients.csv`, `summary.json`).", len(s.pairs))))
	} else {
		d = append(d, harness.Para("Failed or missing: "+strings.Join(bad, ", ")))
	}
	d = append(d, checks, t)
	mem := &harness.Table{Right: true, Head: []string{"reading", "servers RSS", "servers Go heap+stacks", "load clients RSS", "Slab", "SUnreclaim", "TCP mem (pages)", "MemAvailable"}}
	st := s.sysStart
	mem.Add("start", "–", "–", "–", gib(st.Slab), gib(st.SUnreclaim), fmt.Sprint(st.TCP["mem"]), gib(st.MemAvailable))
	for at, name := range readings {
		if sys := s.sys[at]; !sys.At.IsZero() {
			a, b, c := s.memory(at)
			mem.Add(name, mib(a), mib(b), mib(c), gib(sys.Slab), gib(sys.SUnreclaim), fmt.Sprint(sys.TCP["mem"]), gib(sys.MemAvailable))
		}
	}
	d = append(d, harness.H2("Memory"), harness.Para("Read idle before the ramp, after the ramp (connections up and idle, after -hold) and at the end of the load (connections still up). The kernel is read first each time: the servers' `/metrics` scrape lists `/proc/PID/fd` and so grows the dentry and proc inode caches (SReclaimable), which is why the kernel figure per connection comes from the after-ramp reading. On loopback both sockets of a connection are in this kernel, so the kernel's figure counts two sockets."), mem)
	if !s.sys[readRamped].At.IsZero() {
		d = append(d, harness.Para(fmt.Sprintf("Per process after the ramp (VmRSS): servers %s, load clients %s (min / median / max; every process in `servers.csv` and `clients.csv`).", spread(srvRSS), spread(cliRSS))))
	}
	if s.smp != nil {
		d = append(d, harness.Para(fmt.Sprintf("At their peak the servers together held %s RSS and the load clients %s (the machine's peak is the summary's memory row).", mib(m.peakSrv), mib(m.peakCli))))
	}
	if top := harness.TopCaches(s.sys[readIdle], s.sys[readRamped], 8); len(top) > 0 && !s.sys[readRamped].At.IsZero() {
		t := &harness.Table{Right: true, Head: []string{"cache", "growth", "per connection"}}
		for _, c := range top {
			t.Add(c.Name, mib(c.Bytes), harness.Per(c.Bytes, cfg.conns))
		}
		d = append(d, harness.Para("Slab caches that grew most over the ramp (`/proc/slabinfo`):"), t)
	}
	if len(s.notes) > 0 {
		d = append(d, harness.H2("Notes"), harness.Para("- "+strings.Join(s.notes, "\n- ")))
	}
	if s.err != nil {
		d = append(d, harness.H2("Error"), harness.Code(s.err.Error()))
	}
	return append(d, harness.H2("Files"), harness.Para("`summary.json` (every figure, per server), `servers.csv`, `clients.csv` (per process), `system.csv` (the machine each second: MemAvailable, Slab, sockstat, busy cores, RSS sums), `timeline.csv` (the servers' /stats each second), `commands.txt`, `server-NN.log`, `client-NN.log`, `client-NN.report.json`, `client-NN.timeline.csv`."))
}

// spread writes min / median / max of byte counts in MiB.
func spread(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	v = slices.Sorted(slices.Values(v))
	return fmt.Sprintf("%s / %s / %s", harness.MiB(v[0]), harness.MiB(v[len(v)/2]), harness.MiB(v[len(v)-1]))
}
