// Package runlog parses what a perf run leaves behind: the lines the Go
// runtime prints with GODEBUG=gctrace=1, the load client's per-second
// timeline CSV, and histograms in the Prometheus text of a /metrics scrape.
// Every parser is pure: it takes bytes or a map and returns values, so it is
// tested without a server.
package runlog

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// GC is one collection as a gctrace line reports it (runtime/extern.go
// documents the format):
//
//	gc 7 @2.065s 3%: 0.52+1.0+0.004 ms clock, 1.0+0.2/0.37/1.0+0.008 ms cpu, 9->9->8 MB, 17 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)
type GC struct {
	N       int           // the collection's number, from 1
	At      time.Duration // when it started, since the process started
	Percent int           // the GC's share of the CPU since the process started, in percent

	// Wall clock of the three phases: the stop-the-world sweep termination,
	// the concurrent mark, the stop-the-world mark termination.
	SweepTerm, Mark, MarkTerm time.Duration

	// CPU time: sweep termination (P × wall), mark assists taken from the
	// program's goroutines, background (dedicated and fractional) marking,
	// marking on idle Ps, mark termination (P × wall).
	SweepTermCPU, AssistCPU, BackgroundCPU, IdleCPU, MarkTermCPU time.Duration

	HeapStart, HeapEnd, HeapLive int64 // MB: at start, at end, marked live
	Goal, Stacks, Globals        int64 // MB
	Procs                        int   // GOMAXPROCS
	Forced                       bool  // runtime.GC() or debug.FreeOSMemory, not the pacer
}

// Pause is how long the program stood still: both stop-the-world phases.
func (g *GC) Pause() time.Duration { return g.SweepTerm + g.MarkTerm }

// CPU is the CPU the collection took from the program: everything but the
// marking done on Ps that had nothing else to run.
func (g *GC) CPU() time.Duration {
	return g.SweepTermCPU + g.AssistCPU + g.BackgroundCPU + g.MarkTermCPU
}

// ParseGCLine parses one gctrace line. ok is false for a line that is not
// one (the server's log lines share its stderr); err is set for a line that
// starts like one but does not parse.
func ParseGCLine(line string) (g GC, ok bool, err error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "gc ") {
		return g, false, nil
	}
	fail := func(what string) (GC, bool, error) {
		return GC{}, true, fmt.Errorf("cannot parse gctrace line %q: %s", line, what)
	}
	head, rest, found := strings.Cut(line, ": ")
	if !found {
		return fail("no ': '")
	}
	// head: gc N @T.TTTs P%[ (checking for goroutine leaks)]
	f := strings.Fields(head)
	if len(f) < 4 || !strings.HasPrefix(f[2], "@") || !strings.HasSuffix(f[2], "s") || !strings.HasSuffix(f[3], "%") {
		return fail("want \"gc N @Ts P%\" before ':'")
	}
	if g.N, err = strconv.Atoi(f[1]); err != nil {
		return fail("number " + f[1])
	}
	at, err := strconv.ParseFloat(f[2][1:len(f[2])-1], 64)
	if err != nil {
		return fail("time " + f[2])
	}
	g.At = time.Duration(at * float64(time.Second))
	if g.Percent, err = strconv.Atoi(f[3][:len(f[3])-1]); err != nil {
		return fail("percent " + f[3])
	}
	g.Forced = strings.HasSuffix(rest, "(forced)")
	rest = strings.TrimSuffix(rest, "(forced)")
	parts := strings.Split(rest, ", ")
	if len(parts) < 7 {
		return fail(fmt.Sprintf("%d comma-separated fields after ':'; want 7", len(parts)))
	}
	clock, ok1 := strings.CutSuffix(parts[0], " ms clock")
	cpu, ok2 := strings.CutSuffix(parts[1], " ms cpu")
	if !ok1 || !ok2 {
		return fail("want \"… ms clock, … ms cpu\"")
	}
	c, err := millis(clock, "+", 3)
	if err != nil {
		return fail(err.Error())
	}
	g.SweepTerm, g.Mark, g.MarkTerm = c[0], c[1], c[2]
	// sweep-term + assist/background/idle + mark-term
	outer := strings.Split(cpu, "+")
	if len(outer) != 3 {
		return fail("cpu: want A+B/C/D+E")
	}
	mark, err := millis(outer[1], "/", 3)
	if err != nil {
		return fail(err.Error())
	}
	ends, err := millis(outer[0]+"+"+outer[2], "+", 2)
	if err != nil {
		return fail(err.Error())
	}
	g.SweepTermCPU, g.AssistCPU, g.BackgroundCPU, g.IdleCPU, g.MarkTermCPU = ends[0], mark[0], mark[1], mark[2], ends[1]
	heap, ok3 := strings.CutSuffix(parts[2], " MB")
	h := strings.Split(heap, "->")
	if !ok3 || len(h) != 3 {
		return fail("heap: want A->B->C MB")
	}
	for i, p := range []*int64{&g.HeapStart, &g.HeapEnd, &g.HeapLive} {
		if *p, err = strconv.ParseInt(h[i], 10, 64); err != nil {
			return fail("heap " + h[i])
		}
	}
	for i, want := range []struct {
		suffix string
		p      *int64
	}{{" MB goal", &g.Goal}, {" MB stacks", &g.Stacks}, {" MB globals", &g.Globals}} {
		v, ok := strings.CutSuffix(parts[3+i], want.suffix)
		if !ok {
			return fail("want N" + want.suffix)
		}
		if *want.p, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
			return fail(want.suffix + " " + v)
		}
	}
	procs, ok4 := strings.CutSuffix(strings.TrimSpace(parts[6]), " P")
	if !ok4 {
		return fail("want N P")
	}
	if g.Procs, err = strconv.Atoi(procs); err != nil {
		return fail("P " + procs)
	}
	return g, true, nil
}

// millis parses n numbers of milliseconds separated by sep.
func millis(s, sep string, n int) ([]time.Duration, error) {
	f := strings.Split(s, sep)
	if len(f) != n {
		return nil, fmt.Errorf("%q: want %d numbers separated by %q", s, n, sep)
	}
	out := make([]time.Duration, n)
	for i, x := range f {
		v, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q: %q is not a number of ms", s, x)
		}
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out, nil
}

// ParseGCTrace reads the gctrace lines of r and skips every other line. bad
// counts lines that start like a gctrace line but do not parse: another
// write landing in the middle of one, as stderr is shared.
func ParseGCTrace(r io.Reader) (gcs []GC, bad int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		g, ok, err := ParseGCLine(sc.Text())
		switch {
		case err != nil:
			bad++
		case ok:
			gcs = append(gcs, g)
		}
	}
	return gcs, bad, sc.Err()
}
