package main

import (
	"slices"
	"time"

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
			if harness.Reconciled(r) {
				f.ReconciledOK++
			}
			if r.Memory != nil {
				cheap += r.Memory.HeapInuse + r.Memory.StackInuse
				cusers += uint64(r.Memory.Users)
			}
		}
		f.ClientRSSRamped += c.rss[readRamped]
		f.ClientRSSEnd += c.rss[readEnd]
	}
	if cusers > 0 {
		f.ClientHeapPerUser = float64(cheap) / float64(cusers)
	}
	f.ClientRSSPerUser = float64(f.ClientRSSRamped) / float64(n)
	var heapIdle, heapRamped int64
	for _, p := range s.servers {
		if p.ok() {
			f.LedgersOK++
		}
		f.ServerRSSIdle += p.mem[readIdle].RSS
		f.ServerRSSRamped += p.mem[readRamped].RSS
		f.ServerRSSEnd += p.mem[readEnd].RSS
		heapIdle += p.mem[readIdle].HeapStacks()
		heapRamped += p.mem[readRamped].HeapStacks()
	}
	f.SummedOK = len(s.summed) > 0 && len(harness.FailedChecks(s.summed)) == 0
	t := s.srvTotals
	f.ShakeGot, f.ShakeAmount, f.GroupCreated, f.GroupAmount, f.Opened, f.OpenedAmount, f.OutstandingFen =
		t.ShakeGot, t.ShakeAmount, t.Created, t.CreatedAmount, t.Opened, t.OpenAmount, t.Outstanding
	if f.ServerRSSRamped > 0 {
		f.ServerRSSPerConn = float64(f.ServerRSSRamped-f.ServerRSSIdle) / float64(n)
		f.ServerHeapPerConn = float64(heapRamped-heapIdle) / float64(n)
		f.SlabPerConn = float64(s.sys[readRamped].Slab-s.sys[readIdle].Slab) / float64(n)
		f.SUnreclaimPerConn = float64(s.sys[readRamped].SUnreclaim-s.sys[readIdle].SUnreclaim) / float64(n)
		if d, ok := harness.SocketSlab(s.sys[readIdle], s.sys[readRamped]); ok {
			f.SocketCachesPerConn = float64(d) / float64(n)
		}
		f.TCPMemPerConnRamped = float64((s.sys[readRamped].TCP["mem"]-s.sys[readIdle].TCP["mem"])*4096) / float64(n)
		f.TCPInUseRamped = s.sys[readRamped].TCP["inuse"]
		f.MeasuredAfterRampSec = s.sys[readRamped].At.Sub(s.rampDone).Seconds()
	}
	if f.ServerRSSEnd > 0 {
		f.ServerRSSEndPerConn = float64(f.ServerRSSEnd-f.ServerRSSIdle) / float64(n)
		f.SlabEnd = float64(s.sys[readEnd].Slab-s.sys[readIdle].Slab) / float64(n)
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
