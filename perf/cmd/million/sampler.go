package main

import (
	"context"
	"sync"
	"time"

	"hongbao/perf/internal/harness"
)

// sysRow is one second of the machine: system.csv.
type sysRow struct {
	T            float64
	Phase        string
	Sys          harness.System
	ServerRSS    int64 // all servers' VmRSS
	ClientRSS    int64 // all load clients' VmRSS
	ServersAlive int
	ClientsAlive int
}

// statRow is one second of the servers' /stats, added up: timeline.csv.
type statRow struct {
	T                                 float64
	Phase                             string
	Conns, Logins                     int64
	Shakes, Got, Created, Opened, New float64 // a second
}

// sampler reads the machine and the processes' RSS every second, in the
// background, and keeps the rows for the files.
type sampler struct {
	start time.Time
	loop  *harness.Loop
	once  sync.Once

	mu      sync.Mutex
	phase   string
	srvPIDs []int
	cliPIDs []int
	rows    []sysRow
	stats   []statRow
	last    harness.System
	low     sysRow // the sample with the least MemAvailable
	peakSrv int64  // the most all servers held at once (RSS)
	peakCli int64
}

func startSampler(ctx context.Context, s *state) *sampler {
	smp := &sampler{start: s.started, phase: "preflight", last: s.sysStart, low: sysRow{Sys: s.sysStart}}
	smp.loop = harness.Repeat(ctx, harness.SecondsAt(500*time.Millisecond), smp.take)
	return smp
}

func (smp *sampler) setPhase(p string) {
	smp.mu.Lock()
	smp.phase = p
	smp.mu.Unlock()
}

// setPIDs makes the samples follow s's processes.
func (smp *sampler) setPIDs(s *state) {
	var srv, cli []int
	for _, p := range s.servers {
		srv = append(srv, p.srv.PID)
	}
	for _, c := range s.clients {
		cli = append(cli, c.PID())
	}
	smp.mu.Lock()
	smp.srvPIDs, smp.cliPIDs = srv, cli
	smp.mu.Unlock()
}

func (smp *sampler) take() {
	sys, err := harness.ReadSystem(false)
	if err != nil {
		return
	}
	smp.mu.Lock()
	srv, cli, phase := smp.srvPIDs, smp.cliPIDs, smp.phase
	smp.mu.Unlock()
	row := sysRow{T: sys.At.Sub(smp.start).Seconds(), Phase: phase, Sys: sys}
	for _, pid := range srv {
		if rss, err := harness.RSS(pid); err == nil {
			row.ServerRSS += rss
			row.ServersAlive++
		}
	}
	for _, pid := range cli {
		if rss, err := harness.RSS(pid); err == nil {
			row.ClientRSS += rss
			row.ClientsAlive++
		}
	}
	smp.mu.Lock()
	defer smp.mu.Unlock()
	smp.rows = append(smp.rows, row)
	smp.last = sys
	if sys.MemAvailable < smp.low.Sys.MemAvailable {
		smp.low = row
	}
	smp.peakSrv = max(smp.peakSrv, row.ServerRSS)
	smp.peakCli = max(smp.peakCli, row.ClientRSS)
}

// latest returns the last reading of the machine.
func (smp *sampler) latest() harness.System {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return smp.last
}

// addStats records a second of the servers' /stats.
func (smp *sampler) addStats(phase string, cur, prev statSum) {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = 1
	}
	r := statRow{T: cur.at.Sub(smp.start).Seconds(), Phase: phase, Conns: cur.conns, Logins: cur.logins,
		Shakes: float64(cur.Requests-prev.Requests) / dt, Got: float64(cur.ShakeGot-prev.ShakeGot) / dt,
		Created: float64(cur.Created-prev.Created) / dt, Opened: float64(cur.Opened-prev.Opened) / dt,
		New: float64(cur.conns-prev.conns) / dt}
	smp.mu.Lock()
	smp.stats = append(smp.stats, r)
	smp.mu.Unlock()
}

// stop ends the sampling with a last sample; later calls do nothing.
func (smp *sampler) stop() {
	smp.once.Do(func() {
		smp.loop.Stop()
		smp.take()
	})
}
