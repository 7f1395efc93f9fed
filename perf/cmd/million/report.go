package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// figures are the run's results, as summary.json holds them.
type figures struct {
	Passed  bool   `json:"passed"`
	Error   string `json:"error,omitempty"`
	Conns   int    `json:"connections"`
	Servers int    `json:"servers"`
	Clients int    `json:"load_clients"`

	RampSeconds          float64 `json:"ramp_s"`                 // launch of the load clients → every user logged in
	RampFromFirstSeconds float64 `json:"ramp_from_first_conn_s"` // first connection up → every user logged in
	RampRate             float64 `json:"ramp_connects_per_s"`

	LoadSeconds     float64   `json:"load_s"`
	TargetQPS       int       `json:"target_qps"`
	SentQPS         float64   `json:"shake_sent_per_s"`     // Σ clients' SHAKEs sent / load seconds
	ServerQPS       float64   `json:"shake_received_per_s"` // Σ servers' shake.requests over the load / load seconds
	SecondMin       float64   `json:"shake_per_s_min"`      // the slowest and fastest whole second, at the servers
	SecondMax       float64   `json:"shake_per_s_max"`
	Shakes          latencies `json:"shake_latency"`
	Opens           latencies `json:"open_latency"`
	Errors          uint64    `json:"client_errors"`
	Skipped         uint64    `json:"skipped_not_connected"`
	ReconciledOK    int       `json:"clients_reconciled_ok"`
	LedgersOK       int       `json:"server_ledgers_ok"`
	SummedOK        bool      `json:"summed_ok"`
	ShakeGot        int64     `json:"shake_got"`
	ShakeAmount     int64     `json:"shake_got_amount"`
	GroupCreated    int64     `json:"group_envelopes_created"`
	GroupAmount     int64     `json:"group_envelopes_created_amount"`
	Opened          int64     `json:"shares_opened"`
	OpenedAmount    int64     `json:"opened_amount"`
	OutstandingFen  int64     `json:"outstanding_amount"`
	ServerCPUPerReq float64   `json:"server_cpu_us_per_shake"`
	ClientCPUPerReq float64   `json:"client_cpu_us_per_shake"`
	MachineCores    float64   `json:"machine_busy_cores_during_load"`
	HoldServerCores float64   `json:"hold_server_cores"` // CPU of all servers holding the connections idle, in cores
	HoldClientCores float64   `json:"hold_client_cores"`
	HoldMachine     float64   `json:"hold_machine_cores"` // everyone's, others' work included

	ServerRSSIdle        int64   `json:"server_rss_idle"`   // Σ before the ramp
	ServerRSSRamped      int64   `json:"server_rss_ramped"` // Σ after the ramp, idle
	ServerRSSEnd         int64   `json:"server_rss_end"`
	ServerRSSPerConn     float64 `json:"server_rss_per_conn"`             // (ramped − idle) / conns
	ServerHeapPerConn    float64 `json:"server_heap_stacks_per_conn"`     // Go heap + stacks, (ramped − idle) / conns
	ServerRSSEndPerConn  float64 `json:"server_rss_end_per_conn"`         // (end − idle) / conns
	ClientRSSRamped      int64   `json:"client_rss_ramped"`               // Σ after the ramp
	ClientRSSEnd         int64   `json:"client_rss_end"`                  // Σ at the end of the load
	ClientRSSPerUser     float64 `json:"client_rss_per_user"`             // Σ ramped / users, the runtimes included
	ClientHeapPerUser    float64 `json:"client_heap_stacks_per_user"`     // the clients' own figure, after a GC
	SlabPerConn          float64 `json:"kernel_slab_per_conn"`            // /proc/meminfo Slab, (ramped − before) / conns
	SUnreclaimPerConn    float64 `json:"kernel_sunreclaim_per_conn"`      // SUnreclaim, the same
	SocketCachesPerConn  float64 `json:"kernel_socket_caches_per_conn"`   // TCP, sock_inode_cache, filp, eventpoll_*
	TCPMemPerConnRamped  float64 `json:"kernel_tcp_buffers_per_conn"`     // sockstat TCP mem, pages × 4096, after the ramp
	TCPMemPeakPages      int64   `json:"kernel_tcp_mem_peak_pages"`       // the most during the run
	MemTotal             int64   `json:"mem_total"`                       // /proc/meminfo
	MemAvailableStart    int64   `json:"mem_available_start"`             // before anything started
	MemAvailableLow      int64   `json:"mem_available_low"`               // the least during the run
	PeakUsed             int64   `json:"peak_used"`                       // start − low
	PeakPhase            string  `json:"peak_phase"`                      // when
	ConntrackMax         int64   `json:"conntrack_peak,omitempty"`        // nf_conntrack_count, the most seen
	TCPInUseRamped       int64   `json:"tcp_sockets_in_use_after_ramp"`   // sockstat inuse
	MeasuredAfterRampSec float64 `json:"memory_read_after_ramp_s"`        // how long the hold was
	SlabEnd              float64 `json:"kernel_slab_per_conn_at_the_end"` // includes the /metrics scrapes' dentries
}

// latencies aggregates one request kind over the load clients: each has its
// own histogram, so the percentiles are the spread of theirs.
type latencies struct {
	Count                     uint64           `json:"count"`
	Mean                      float64          `json:"mean_ns"`
	P50Median, P50Min, P50Max int64            `json:"-"`
	P99Median, P99Min, P99Max int64            `json:"-"`
	P999Max, Max              int64            `json:"-"`
	JSON                      map[string]int64 `json:"percentiles_ns"`
}

func aggregate(cs []*clientProc, kind string) latencies {
	var l latencies
	var p50, p99 []int64
	var sum float64
	for _, c := range cs {
		if c.rep == nil || c.rep.Requests[kind] == nil {
			continue
		}
		r := c.rep.Requests[kind].Latency
		if r.Count == 0 {
			continue
		}
		l.Count += r.Count
		sum += r.Mean * float64(r.Count)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		l.P999Max = max(l.P999Max, r.P999)
		l.Max = max(l.Max, r.Max)
	}
	if l.Count > 0 {
		l.Mean = sum / float64(l.Count)
		slices.Sort(p50)
		slices.Sort(p99)
		l.P50Median, l.P50Min, l.P50Max = p50[len(p50)/2], p50[0], p50[len(p50)-1]
		l.P99Median, l.P99Min, l.P99Max = p99[len(p99)/2], p99[0], p99[len(p99)-1]
	}
	l.JSON = map[string]int64{"p50_median": l.P50Median, "p50_min": l.P50Min, "p50_max": l.P50Max,
		"p99_median": l.P99Median, "p99_min": l.P99Min, "p99_max": l.P99Max, "p99_9_max": l.P999Max, "max": l.Max}
	return l
}

func msf(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }

func (s *state) figures() figures {
	cfg := &s.cfg
	n := cfg.conns
	f := figures{Passed: s.passed, Conns: n, Servers: len(s.servers), Clients: len(s.clients), TargetQPS: cfg.qps}
	if s.err != nil {
		f.Error = s.err.Error()
	}
	if !s.rampDone.IsZero() {
		f.RampSeconds = s.rampDone.Sub(s.launched).Seconds()
		f.RampFromFirstSeconds = s.rampDone.Sub(s.firstUp).Seconds()
		f.RampRate = float64(n) / f.RampSeconds
	}
	if !s.loadStart.IsZero() && !s.stats1.at.IsZero() {
		f.LoadSeconds = s.loadEnd.Sub(s.loadStart).Seconds()
		f.ServerQPS = float64(s.stats1.Requests-s.stats0.Requests) / f.LoadSeconds
		f.SentQPS = float64(s.cliTotals.Requests) / f.LoadSeconds
		if len(s.perSecond) > 0 {
			f.SecondMin, f.SecondMax = slices.Min(s.perSecond), slices.Max(s.perSecond)
		}
		shakes := float64(s.stats1.Requests - s.stats0.Requests)
		if shakes > 0 {
			f.ServerCPUPerReq = float64((s.cpu1.servers - s.cpu0.servers).Microseconds()) / shakes
			f.ClientCPUPerReq = float64((s.cpu1.clients - s.cpu0.clients).Microseconds()) / shakes
		}
		f.MachineCores = (s.busy1 - s.busy0).Seconds() / s.loadEnd.Add(500*time.Millisecond).Sub(s.loadStart).Seconds()
	}
	if d := s.holdAt1.Sub(s.holdAt0).Seconds(); d > 0 {
		f.HoldServerCores = (s.holdCPU1.servers - s.holdCPU0.servers).Seconds() / d
		f.HoldClientCores = (s.holdCPU1.clients - s.holdCPU0.clients).Seconds() / d
		f.HoldMachine = (s.holdBusy1 - s.holdBusy0).Seconds() / d
	}
	f.Shakes, f.Opens = aggregate(s.clients, "SHAKE"), aggregate(s.clients, "OPEN")
	var cheap, cusers uint64
	for _, c := range s.clients {
		if r := c.rep; r != nil {
			for _, e := range r.Errors {
				f.Errors += e
			}
			f.Skipped += r.Skipped
			if reconciled(r) {
				f.ReconciledOK++
			}
			if r.Memory != nil {
				cheap += r.Memory.HeapInuse + r.Memory.StackInuse
				cusers += uint64(r.Memory.Users)
			}
		}
		f.ClientRSSRamped += c.ramped.RSS
		f.ClientRSSEnd += c.end.RSS
	}
	if cusers > 0 {
		f.ClientHeapPerUser = float64(cheap) / float64(cusers)
	}
	f.ClientRSSPerUser = float64(f.ClientRSSRamped) / float64(n)
	var heapIdle, heapRamped int64
	for _, p := range s.servers {
		if len(p.checks) > 0 && allOK(p.checks) {
			f.LedgersOK++
		}
		f.ServerRSSIdle += p.idle.RSS
		f.ServerRSSRamped += p.ramped.RSS
		f.ServerRSSEnd += p.end.RSS
		heapIdle += p.idle.HeapInuse + p.idle.StackInuse
		heapRamped += p.ramped.HeapInuse + p.ramped.StackInuse
	}
	f.SummedOK = len(s.summed) > 0 && allOK(s.summed)
	t := s.srvTotals
	f.ShakeGot, f.ShakeAmount, f.GroupCreated, f.GroupAmount, f.Opened, f.OpenedAmount, f.OutstandingFen =
		t.ShakeGot, t.ShakeAmount, t.Created, t.CreatedAmount, t.Opened, t.OpenAmount, t.Outstanding
	if f.ServerRSSRamped > 0 {
		f.ServerRSSPerConn = float64(f.ServerRSSRamped-f.ServerRSSIdle) / float64(n)
		f.ServerHeapPerConn = float64(heapRamped-heapIdle) / float64(n)
		f.SlabPerConn = float64(s.sysRamped.Slab-s.sysBefore.Slab) / float64(n)
		f.SUnreclaimPerConn = float64(s.sysRamped.SUnreclaim-s.sysBefore.SUnreclaim) / float64(n)
		if d, ok := harness.SocketSlab(s.kernBefore, s.kernRamped); ok {
			f.SocketCachesPerConn = float64(d) / float64(n)
		}
		f.TCPMemPerConnRamped = float64((s.sysRamped.TCP["mem"]-s.sysBefore.TCP["mem"])*4096) / float64(n)
		f.TCPInUseRamped = s.sysRamped.TCP["inuse"]
		f.MeasuredAfterRampSec = s.sysRamped.At.Sub(s.rampDone).Seconds()
	}
	if f.ServerRSSEnd > 0 {
		f.ServerRSSEndPerConn = float64(f.ServerRSSEnd-f.ServerRSSIdle) / float64(n)
		f.SlabEnd = float64(s.sysEnd.Slab-s.sysBefore.Slab) / float64(n)
	}
	f.MemTotal, f.MemAvailableStart = s.sysStart.MemTotal, s.sysStart.MemAvailable
	if s.smp != nil {
		s.smp.mu.Lock()
		f.MemAvailableLow, f.PeakPhase = s.smp.low.Sys.MemAvailable, s.smp.low.Phase
		for _, r := range s.smp.rows {
			f.ConntrackMax = max(f.ConntrackMax, r.Sys.Conntrack)
			f.TCPMemPeakPages = max(f.TCPMemPeakPages, r.Sys.TCP["mem"])
		}
		s.smp.mu.Unlock()
		f.PeakUsed = f.MemAvailableStart - f.MemAvailableLow
	}
	return f
}

// write writes the run's files: report.md, summary.json, servers.csv,
// clients.csv, system.csv, timeline.csv and commands.txt.
func (s *state) write() error {
	f := s.figures()
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	path := func(name string) string { return filepath.Join(s.dir, name) }

	sum := map[string]any{"figures": f, "config": s.configMap(), "environment": s.env, "notes": s.notes, "summed_checks": s.summed,
		"started": s.started, "commit": gitCommit()}
	var per []map[string]any
	for _, p := range s.servers {
		per = append(per, map[string]any{"index": p.part.index, "pid": p.srv.PID, "listen": p.srv.Listen, "admin": p.srv.Admin.URL,
			"users": p.part.users.String(), "idle": p.idle, "ramped": p.ramped, "end": p.end, "stats": p.stats, "campaigns": p.camps,
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
				p.part.index, p.srv.PID, p.srv.Listen, p.srv.Admin.URL, p.part.users, p.idle.RSS, p.ramped.RSS, p.end.RSS,
				p.idle.HeapInuse, p.ramped.HeapInuse, p.end.HeapInuse, p.ramped.StackInuse, p.ramped.Goroutines, float64(p.ramped.Scrape.Microseconds())/1e3,
				p.part.users.Len(), st.Logins, st.Shake.Requests, st.Shake.Got, st.Shake.GotAmount, st.Shake.CreatedAmount, st.Shake.PoolAmount,
				st.Envelopes.Created, st.Envelopes.CreatedAmount, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.OutstandingAmount,
				st.Envelopes.SystemSkipped, st.Shake.Overload+st.Envelopes.Overload, len(p.checks) > 0 && allOK(p.checks), p.exitCode)
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
			if c.err != nil {
				exit = strings.ReplaceAll(c.err.Error(), ",", ";")
			}
			fmt.Fprintf(w, "%d,%d,%s,%s,%d,%d,%d,%.0f,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%d,%.3f,%d,%d,%d,%d,%d,%v,%s\n",
				c.part.index, c.cmd.Process.Pid, c.part.users, strings.ReplaceAll(joinAddrs(c.part.sources), ",", " "), c.part.connectRate,
				c.ramped.RSS, c.end.RSS, hpu, r.Connects, q.Sent, q.Answered, q.Status["1"],
				float64(q.Latency.P50)/1e6, float64(q.Latency.P99)/1e6, float64(q.Latency.P999)/1e6, float64(q.Latency.Max)/1e6,
				o.Sent, float64(o.Latency.P99)/1e6, r.Pushes["ENVELOPE"], r.ShakeAmount, r.OpenAmount, errsum, r.Skipped, reconciled(c.rep), exit)
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
	add(harness.WriteFile(path("commands.txt"), func(w io.Writer) {
		fmt.Fprintf(w, "# %s\n", s.cmdline)
		for _, p := range s.servers {
			fmt.Fprintf(w, "GOMAXPROCS=%d %s %s   # pid %d: serving %s, admin %s\n", s.cfg.serverProcs, filepath.Join(s.cfg.bin, "server"),
				strings.Join(append([]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-log-format", "json"}, p.args...), " "), p.srv.PID, p.srv.Listen, p.srv.Admin.URL)
		}
		for _, c := range s.clients {
			fmt.Fprintf(w, "GOMAXPROCS=%d %s %s   # pid %d\n", s.cfg.clientProcs, c.cmd.Path, strings.Join(c.args, " "), c.cmd.Process.Pid)
		}
	}))
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
		{"connections", fmt.Sprintf("%s over %d servers × ~%s, %d load clients", thousands(int64(n)), f.Servers, thousands(int64(n/max(f.Servers, 1))), f.Clients)},
		{"ramp", fmt.Sprintf("%.1f s from the launch of the load clients (%.1f s from the first connection), %s connects/s", f.RampSeconds, f.RampFromFirstSeconds, thousands(int64(f.RampRate)))},
		{"load", fmt.Sprintf("%.0f s at %s SHAKE/s target: sent %s/s, received %s/s (whole seconds %s–%s)", f.LoadSeconds, thousands(int64(f.TargetQPS)),
			thousands(int64(f.SentQPS+0.5)), thousands(int64(f.ServerQPS+0.5)), thousands(int64(f.SecondMin)), thousands(int64(f.SecondMax)))},
		{"SHAKE latency", fmt.Sprintf("p50 %s (clients %s–%s), p99 %s (clients %s–%s), p99.9 ≤ %s, max %s; %s SHAKEs",
			msf(f.Shakes.P50Median), msf(f.Shakes.P50Min), msf(f.Shakes.P50Max), msf(f.Shakes.P99Median), msf(f.Shakes.P99Min), msf(f.Shakes.P99Max),
			msf(f.Shakes.P999Max), msf(f.Shakes.Max), thousands(int64(f.Shakes.Count)))},
		{"OPEN latency", fmt.Sprintf("p50 %s, p99 %s (clients up to %s), max %s; %s OPENs", msf(f.Opens.P50Median), msf(f.Opens.P99Median), msf(f.Opens.P99Max), msf(f.Opens.Max), thousands(int64(f.Opens.Count)))},
		{"money", fmt.Sprintf("SHAKE %s got %s fen; group envelopes %s (%s fen), %s shares opened (%s fen), outstanding %s fen",
			thousands(f.ShakeGot), thousands(f.ShakeAmount), thousands(f.GroupCreated), thousands(f.GroupAmount), thousands(f.Opened), thousands(f.OpenedAmount), thousands(f.OutstandingFen))},
		{"reconciliation", fmt.Sprintf("%d/%d load clients with their server (strict), %d/%d server ledgers, summed %v", f.ReconciledOK, f.Clients, f.LedgersOK, f.Servers, okWord(f.SummedOK))},
		{"client errors", fmt.Sprintf("%d; SHAKEs skipped (not connected) %d", f.Errors, f.Skipped)},
		{"CPU", fmt.Sprintf("servers %.1f µs, load clients %.1f µs per SHAKE; machine %.2f of %d cores busy during the load (others' work included); holding the connections idle: servers %.2f, load clients %.2f cores",
			f.ServerCPUPerReq, f.ClientCPUPerReq, f.MachineCores, numCPU(), f.HoldServerCores, f.HoldClientCores)},
		{"server user space", fmt.Sprintf("RSS %s idle → %s ramped → %s at the end: %s/conn (Go heap+stacks %s/conn); at the end %s/conn",
			mib(f.ServerRSSIdle), mib(f.ServerRSSRamped), mib(f.ServerRSSEnd), bytesF(f.ServerRSSPerConn), bytesF(f.ServerHeapPerConn), bytesF(f.ServerRSSEndPerConn))},
		{"load-client user space", fmt.Sprintf("RSS %s ramped, %s at the end: %s/user with the runtimes (heap+stacks %s/user)", mib(f.ClientRSSRamped), mib(f.ClientRSSEnd), bytesF(f.ClientRSSPerUser), bytesF(f.ClientHeapPerUser))},
		{"kernel", fmt.Sprintf("Slab %s/conn (SUnreclaim %s; socket caches %s; TCP buffers %s) for both ends of each connection; at the end Slab %s/conn", bytesF(f.SlabPerConn), bytesF(f.SUnreclaimPerConn), bytesF(f.SocketCachesPerConn), bytesF(f.TCPMemPerConnRamped), bytesF(f.SlabEnd))},
		{"memory", fmt.Sprintf("peak %s used (MemAvailable %s → %s, in %s) of MemTotal %s: %s to spare", gib(f.PeakUsed), gib(f.MemAvailableStart), gib(f.MemAvailableLow), f.PeakPhase, gib(f.MemTotal), gib(f.MemAvailableLow))},
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
	return fmt.Sprintf("%s / %s / %s", mib(v[0]), mib(v[len(v)/2]), mib(v[len(v)-1]))
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
	fmt.Fprintln(s.out)
	tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	for _, r := range s.summaryRows(&f) {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	tw.Flush()
}

// markdown writes report.md.
func (s *state) markdown(w io.Writer, f *figures) {
	cfg := &s.cfg
	fmt.Fprintf(w, "# million: %s connections on one host\n\n", thousands(int64(cfg.conns)))
	fmt.Fprintf(w, "Run of %s, commit %s, %d CPUs, MemTotal %s.\n\n", s.started.Format(time.RFC3339), gitCommit(), numCPU(), gib(s.sysStart.MemTotal))
	fmt.Fprintf(w, "```sh\n%s\n```\n\n", s.cmdline)
	fmt.Fprintln(w, "## Summary\n\n| figure | value |\n|---|---|")
	for _, r := range s.summaryRows(f) {
		fmt.Fprintf(w, "| %s | %s |\n", r[0], strings.ReplaceAll(r[1], "|", "\\|"))
	}
	fmt.Fprintln(w, "\n## Layout")
	if len(s.layout) > 0 {
		first, last := s.layout[0], s.layout[len(s.layout)-1]
		fmt.Fprintf(w, "\n- %d server processes (`bin/server %s`, GOMAXPROCS=%d), each on its own port 127.0.0.1:PORT with its own admin port (kernel-chosen), holding %s–%s connections.\n",
			cfg.servers, cfg.serverFlags, cfg.serverProcs, thousands(int64(last.users.Len())), thousands(int64(first.users.Len())))
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
		if len(p.checks) == 0 || !allOK(p.checks) {
			bad = append(bad, fmt.Sprintf("server %d", p.part.index))
		}
	}
	for _, c := range s.clients {
		if !reconciled(c.rep) {
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
				st.Envelopes.Opened, st.Envelopes.OpenedAmount, co, okWord(len(p.checks) > 0 && allOK(p.checks)), okWord(reconciled(c.rep)))
		}
	}
	fmt.Fprintln(w, "\n## Memory\n\nRead idle before the ramp, after the ramp (connections up and idle, after -hold) and at the end of the load (connections still up). The kernel is read first each time: the servers' `/metrics` scrape lists `/proc/PID/fd` and so grows the dentry and proc inode caches (SReclaimable), which is why the kernel figure per connection comes from the after-ramp reading. On loopback both sockets of a connection are in this kernel, so the kernel's figure counts two sockets.\n\n| reading | servers RSS | servers Go heap+stacks | load clients RSS | Slab | SUnreclaim | TCP mem (pages) | MemAvailable |\n|---|--:|--:|--:|--:|--:|--:|--:|")
	row := func(name string, sys system, srv func(*serverProc) procMem, cli func(*clientProc) procMem) {
		a, b, c := s.memory(srv, cli)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %s |\n", name, mib(a), mib(b), mib(c), gib(sys.Slab), gib(sys.SUnreclaim), sys.TCP["mem"], gib(sys.MemAvailable))
	}
	zero := func(*clientProc) procMem { return procMem{} }
	fmt.Fprintf(w, "| start | – | – | – | %s | %s | %d | %s |\n", gib(s.sysStart.Slab), gib(s.sysStart.SUnreclaim), s.sysStart.TCP["mem"], gib(s.sysStart.MemAvailable))
	row("servers idle", s.sysBefore, func(p *serverProc) procMem { return p.idle }, zero)
	if !s.sysRamped.At.IsZero() {
		row("after the ramp", s.sysRamped, func(p *serverProc) procMem { return p.ramped }, func(c *clientProc) procMem { return c.ramped })
	}
	if !s.sysEnd.At.IsZero() {
		row("end of the load", s.sysEnd, func(p *serverProc) procMem { return p.end }, func(c *clientProc) procMem { return c.end })
	}
	if !s.sysRamped.At.IsZero() {
		var srv, cli []int64
		for _, p := range s.servers {
			srv = append(srv, p.ramped.RSS)
		}
		for _, c := range s.clients {
			cli = append(cli, c.ramped.RSS)
		}
		fmt.Fprintf(w, "\nPer process after the ramp (VmRSS): servers %s, load clients %s (min / median / max; every process in `servers.csv` and `clients.csv`).\n", spread(srv), spread(cli))
	}
	if s.smp != nil {
		fmt.Fprintf(w, "\nPeak: MemAvailable fell to %s (in phase %s), %s below the start; the servers together peaked at %s RSS and the load clients at %s.\n",
			gib(f.MemAvailableLow), f.PeakPhase, gib(f.PeakUsed), mib(s.smp.peakSrv), mib(s.smp.peakCli))
	}
	if d := harness.TopCaches(s.kernBefore, s.kernRamped, 8); len(d) > 0 && !s.sysRamped.At.IsZero() {
		fmt.Fprintln(w, "\nSlab caches that grew most over the ramp (`/proc/slabinfo`):\n\n| cache | growth | per connection |\n|---|--:|--:|")
		for _, c := range d {
			fmt.Fprintf(w, "| %s | %s | %s |\n", c.Name, mib(c.Bytes), per(c.Bytes, cfg.conns))
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
