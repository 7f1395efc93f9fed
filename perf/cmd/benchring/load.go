package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"hongbao/perf/internal/harness"
)

// cpuSnapshot is the machine's busy CPU time and the CPU time of this
// process's finished children (go test and what it ran), so that the CPU
// other processes took during the run is the difference of the deltas.
type cpuSnapshot struct {
	at             time.Time
	busy, children time.Duration
	loadavg        string
}

func snapshot() (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now()}
	var err error
	if s.busy, err = harness.MachineBusy(); err != nil {
		return s, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return s, os.NewSyscallError("getrusage", err)
	}
	s.children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			s.loadavg = strings.Join(f[:3], " ")
		}
	}
	return s, nil
}

// othersLoad describes how much CPU other processes took between a and b,
// in % of the whole machine, with the load average at the start.
func othersLoad(a, b cpuSnapshot, cpus int) string {
	wall := b.at.Sub(a.at)
	others := (b.busy - a.busy) - (b.children - a.children)
	pct := 100 * others.Seconds() / (wall.Seconds() * float64(cpus))
	return fmt.Sprintf("other processes used %.0f%% of the %d CPUs during the run (load average at the start: %s)", max(pct, 0), cpus, a.loadavg)
}
