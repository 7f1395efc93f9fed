package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
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
	// The heap profile (which holds the allocs samples too: allocs is the
	// same profile showing alloc_space) is as of the last completed GC, so
	// both snapshots force one with gc=1, which only /heap honours: their
	// difference is then exactly what was allocated in between, the CPU
	// profile's window. allocs.pprof, read right after, is as of that GC.
	cpuSecs, traceSecs := int(cfg.cpuProf.Seconds()), int(cfg.trace.Seconds())
	var errs []error
	for _, g := range []struct {
		path, file, what string
		d                time.Duration
		from, to         *time.Time
	}{
		{"/debug/pprof/heap?gc=1", "allocs-start.pprof", "GC, then the heap profile with the allocations so far: the base of the allocs flame graph", 0, &c.AllocsFrom, nil},
		{"/debug/pprof/profile?seconds=" + strconv.Itoa(cpuSecs), "cpu.pprof", fmt.Sprintf("CPU profile, %d s", cpuSecs), cfg.cpuProf, &c.CPUFrom, &c.CPUTo},
		{"/debug/pprof/heap?gc=1", "heap.pprof", "GC, then the heap profile: live objects now, and the allocations so far", 0, nil, &c.AllocsTo},
		{"/debug/pprof/allocs", "allocs.pprof", "allocations so far (as of the GC just forced); minus allocs-start.pprof: those of the CPU profile's window", 0, nil, nil},
		{"/debug/pprof/goroutine?debug=1", "goroutine.txt", "goroutines, grouped by stack (first line: the count)", 0, nil, nil},
		{"/debug/pprof/trace?seconds=" + strconv.Itoa(traceSecs), "trace.out", fmt.Sprintf("runtime/trace slice, %d s (view: go tool trace trace.out)", traceSecs), cfg.trace, &c.TraceFrom, &c.TraceTo},
	} {
		t0 := time.Now()
		err := a.Fetch(ctx, g.path, filepath.Join(dir, g.file), g.d+30*time.Second)
		t1 := time.Now()
		log.Add(t0, g.what, fmt.Sprintf("curl -sS -o %s '%s%s'", filepath.Join(dir, g.file), a.URL, g.path), t1.Sub(t0))
		if g.from != nil {
			*g.from = t0
		}
		if g.to != nil {
			*g.to = t1
		}
		if err == nil {
			c.Files = append(c.Files, g.file)
		}
		if err == nil && g.file == "goroutine.txt" {
			c.Goroutines, err = goroutineCount(filepath.Join(dir, g.file))
		}
		errs = append(errs, err)
	}
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
