package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of /proc/stat: USER_HZ, 100 on every Linux architecture
// that Go supports.
const userHZ = 100

// cpuSnapshot is the machine's busy CPU time and the CPU time of this
// process's finished children (go test and what it ran), so that the CPU that
// other processes took during the run is the difference of the deltas.
type cpuSnapshot struct {
	at       time.Time
	busy     time.Duration // all CPUs, not idle, not iowait, not stolen by the hypervisor
	children time.Duration
	loadavg  string
}

func snapshot() (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now()}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return s, errors.New("/proc/stat: empty")
	}
	// cpu  user nice system idle iowait irq softirq steal …
	fields := strings.Fields(sc.Text())
	if len(fields) < 8 || fields[0] != "cpu" {
		return s, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/stat: field %d %q: %w", i, fields[i], err)
		}
		s.busy += time.Duration(v) * time.Second / userHZ
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
