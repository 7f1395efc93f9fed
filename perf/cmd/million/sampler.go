package main

import (
	"sync"
	"time"

	"hongbao/perf/internal/harness"
)

// sysRow is one second of the machine: system.csv.
type sysRow struct {
	T            float64
	Phase        string
	Sys          system
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

	mu       sync.Mutex
	phase    string
	srvPIDs  []int
	cliPIDs  []int
	rows     []sysRow
	stats    []statRow
	last     system
	low      sysRow // the sample with the least MemAvailable
	peakSrv  int64  // the most all servers held at once (RSS)
	peakCli  int64
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func startSampler(s *state) *sampler {
	smp := &sampler{start: s.started, phase: "preflight", quit: make(chan struct{}), done: make(chan struct{})}
	smp.last = s.sysStart
	smp.low = sysRow{Sys: s.sysStart}
	go func() {
		defer close(smp.done)
		for {
			smp.take()
			select {
			case <-smp.quit:
				return
			case <-time.After(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 500*time.Millisecond))):
			}
		}
	}()
	return smp
}

func (smp *sampler) setPhase(p string) {
	smp.mu.Lock()
	smp.phase = p
	smp.mu.Unlock()
}

func (smp *sampler) setPIDs(servers, clients []int) {
	smp.mu.Lock()
	smp.srvPIDs, smp.cliPIDs = servers, clients
	smp.mu.Unlock()
}

func (s *state) pids() (servers, clients []int) {
	for _, p := range s.servers {
		servers = append(servers, p.srv.PID)
	}
	for _, c := range s.clients {
		clients = append(clients, c.cmd.Process.Pid)
	}
	return servers, clients
}

func (smp *sampler) take() {
	sys, err := readSystem()
	if err != nil {
		return
	}
	smp.mu.Lock()
	srv, cli := smp.srvPIDs, smp.cliPIDs
	phase := smp.phase
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
func (smp *sampler) latest() system {
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

// stop takes a last sample and ends the sampling.
func (smp *sampler) stop() {
	smp.stopOnce.Do(func() {
		close(smp.quit)
		<-smp.done
		smp.take()
	})
}
