package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hongbao/perf/internal/harness"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// captures is what the steady phase's captures got.
type captures struct {
	AllocsFrom, AllocsTo time.Time // the allocs-start and allocs snapshots
	CPUFrom, CPUTo       time.Time
	TraceFrom, TraceTo   time.Time
	Goroutines           int // from goroutine?debug=1
	Files                []string
}

// capture takes the profiles from the admin API at adminURL into dir,
// starting at at: an allocs snapshot, the CPU profile, allocs, heap,
// goroutines, and the runtime trace, one after the other so that no capture
// disturbs another's figures.
func capture(ctx context.Context, a *harness.Admin, cfg *config, at time.Time, dir string, log *harness.Steps) (captures, error) {
	var c captures
	select {
	case <-ctx.Done():
		return c, ctx.Err()
	case <-time.After(time.Until(at)):
	}
	get := func(path, file, what string, d time.Duration) (time.Time, time.Time, error) {
		t0 := time.Now()
		err := a.Fetch(ctx, path, filepath.Join(dir, file), d+30*time.Second)
		t1 := time.Now()
		log.Add(t0, what, fmt.Sprintf("curl -sS -o %s '%s%s'", filepath.Join(dir, file), a.URL, path), t1.Sub(t0))
		if err == nil {
			c.Files = append(c.Files, file)
		}
		return t0, t1, err
	}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The heap profile (which holds the allocs samples too: allocs is the
	// same profile showing alloc_space) is as of the last completed GC, so
	// both snapshots force one with gc=1, which only /heap honours: their
	// difference is then exactly what was allocated in between, the CPU
	// profile's window. allocs.pprof, read right after, is as of that GC.
	var err error
	c.AllocsFrom, _, err = get("/debug/pprof/heap?gc=1", "allocs-start.pprof", "GC, then the heap profile with the allocations so far: the base of the allocs flame graph", 0)
	keep(err)
	secs := int(cfg.cpuProf.Seconds())
	c.CPUFrom, c.CPUTo, err = get("/debug/pprof/profile?seconds="+strconv.Itoa(secs), "cpu.pprof", fmt.Sprintf("CPU profile, %d s", secs), cfg.cpuProf)
	keep(err)
	_, c.AllocsTo, err = get("/debug/pprof/heap?gc=1", "heap.pprof", "GC, then the heap profile: live objects now, and the allocations so far", 0)
	keep(err)
	_, _, err = get("/debug/pprof/allocs", "allocs.pprof", "allocations so far (as of the GC just forced); minus allocs-start.pprof: those of the CPU profile's window", 0)
	keep(err)
	_, _, err = get("/debug/pprof/goroutine?debug=1", "goroutine.txt", "goroutines, grouped by stack (first line: the count)", 0)
	keep(err)
	if err == nil {
		c.Goroutines, err = goroutineCount(filepath.Join(dir, "goroutine.txt"))
		keep(err)
	}
	secs = int(cfg.trace.Seconds())
	c.TraceFrom, c.TraceTo, err = get("/debug/pprof/trace?seconds="+strconv.Itoa(secs), "trace.out", fmt.Sprintf("runtime/trace slice, %d s (view: go tool trace trace.out)", secs), cfg.trace)
	keep(err)
	return c, errors.Join(errs...)
}

// goroutineCount reads the count from the first line of a goroutine?debug=1
// profile: "goroutine profile: total N".
func goroutineCount(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "goroutine profile: total "); ok {
			return strconv.Atoi(strings.TrimSpace(n))
		}
	}
	return 0, fmt.Errorf("%s: no \"goroutine profile: total N\" first line", path)
}
