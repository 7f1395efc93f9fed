package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// sysRow is one second of the machine: system.csv.
type sysRow struct {
	T                          float64
	Phase                      string
	Sys                        harness.System
	ServerRSS, ClientRSS       int64 // summed VmRSS
	ServersAlive, ClientsAlive int
}

// sampler reads the machine and the processes' RSS every second in the
// background.
type sampler struct {
	start time.Time
	loop  *harness.Loop
	once  sync.Once

	mu    sync.Mutex
	phase string
	pids  [2][]int // servers, load clients
	rows  []sysRow
	first harness.System
}

func startSampler(ctx context.Context, s *state) *sampler {
	smp := &sampler{start: s.started, phase: "preflight", first: s.sysStart}
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
	var pids [2][]int
	for _, p := range s.pairs {
		pids[0] = append(pids[0], p.srv.PID)
		if p.cli != nil {
			pids[1] = append(pids[1], p.cli.PID())
		}
	}
	smp.mu.Lock()
	smp.pids = pids
	smp.mu.Unlock()
}

func (smp *sampler) take() {
	sys, err := harness.ReadSystem(false)
	if err != nil {
		return
	}
	smp.mu.Lock()
	pids, phase := smp.pids, smp.phase
	smp.mu.Unlock()
	row := sysRow{T: sys.At.Sub(smp.start).Seconds(), Phase: phase, Sys: sys}
	sum := func(pids []int, rss *int64, alive *int) {
		for _, pid := range pids {
			if r, err := harness.RSS(pid); err == nil {
				*rss += r
				*alive++
			}
		}
	}
	sum(pids[0], &row.ServerRSS, &row.ServersAlive)
	sum(pids[1], &row.ClientRSS, &row.ClientsAlive)
	smp.mu.Lock()
	smp.rows = append(smp.rows, row)
	smp.mu.Unlock()
}

// latest returns the last reading of the machine.
func (smp *sampler) latest() harness.System {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	if len(smp.rows) == 0 {
		return smp.first
	}
	return smp.rows[len(smp.rows)-1].Sys
}

// stop ends the sampling with a last sample and returns the rows.
func (smp *sampler) stop() []sysRow {
	smp.once.Do(func() {
		smp.loop.Stop()
		smp.take()
	})
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return slices.Clone(smp.rows)
}
