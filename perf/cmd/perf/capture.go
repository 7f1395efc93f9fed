package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// steps records what a run does, each step as the command a user would type
// to do it by hand. Safe for concurrent use.
type steps struct {
	mu    sync.Mutex
	start time.Time // the load client's start: steps say when they ran relative to it
	list  []step
}

type step struct {
	At       time.Time
	What     string
	Cmd      string
	Duration time.Duration // how long it took, if it is timed
}

func (s *steps) add(at time.Time, what, cmd string, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, step{At: at, What: what, Cmd: cmd, Duration: took})
}

func (s *steps) setStart(t time.Time) {
	s.mu.Lock()
	s.start = t
	s.mu.Unlock()
}

// all returns the steps in the order they started, with the run's start.
func (s *steps) all() ([]step, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]step(nil), s.list...)
	for i := 1; i < len(out); i++ { // insertion sort: few, nearly sorted
		for j := i; j > 0 && out[j].At.Before(out[j-1].At); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, s.start
}

// when formats t relative to the run's start.
func when(t, start time.Time) string {
	if start.IsZero() {
		return "setup"
	}
	return fmt.Sprintf("t=%+.1fs", t.Sub(start).Seconds())
}

// writeCommands writes the steps as a shell-readable file: each command
// with a comment saying when it ran and why.
func writeCommands(path string, s *steps) error {
	list, start := s.all()
	var b strings.Builder
	fmt.Fprintf(&b, "# The commands of this perf run, in order; t is seconds since the load client's start (%s).\n", start.Format(time.RFC3339Nano))
	fmt.Fprintf(&b, "# Ports are the ones the kernel chose for this run; by hand, pick fixed ones (-listen 127.0.0.1:9000 -admin 127.0.0.1:6060).\n\n")
	for _, st := range list {
		took := ""
		if st.Duration > 0 {
			took = fmt.Sprintf(" (took %v)", st.Duration.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "# %s: %s%s\n%s\n\n", when(st.At, start), st.What, took, st.Cmd)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// fetch GETs url into the file at path.
func fetch(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return f.Close()
}

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
func capture(ctx context.Context, adminURL string, cfg *config, at time.Time, dir string, log *steps) (captures, error) {
	var c captures
	select {
	case <-ctx.Done():
		return c, ctx.Err()
	case <-time.After(time.Until(at)):
	}
	get := func(path, file, what string, d time.Duration) (time.Time, time.Time, error) {
		url := adminURL + path
		t0 := time.Now()
		err := fetch(ctx, url, filepath.Join(dir, file), d+30*time.Second)
		t1 := time.Now()
		log.add(t0, what, fmt.Sprintf("curl -sS -o %s '%s'", filepath.Join(dir, file), url), t1.Sub(t0))
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
