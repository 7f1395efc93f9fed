// Package runlog parses what a perf run leaves behind: the lines the Go
// runtime prints with GODEBUG=gctrace=1, the load client's per-second
// timeline CSV, and histograms in the Prometheus text of a /metrics scrape.
// Every parser is pure: it takes bytes or a map and returns values, so it is
// tested without a server.
package runlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
	// The head may go on after the percent: " (checking for goroutine leaks)".
	head, rest, _ := strings.Cut(line, ": ")
	rest, g.Forced = strings.CutSuffix(rest, "(forced)")
	var at float64
	var ms [8]float64
	_, err1 := fmt.Sscanf(head, "gc %d @%fs %d%%", &g.N, &at, &g.Percent)
	_, err2 := fmt.Sscanf(rest, "%f+%f+%f ms clock, %f+%f/%f/%f+%f ms cpu, %d->%d->%d MB, %d MB goal, %d MB stacks, %d MB globals, %d P",
		&ms[0], &ms[1], &ms[2], &ms[3], &ms[4], &ms[5], &ms[6], &ms[7], &g.HeapStart, &g.HeapEnd, &g.HeapLive, &g.Goal, &g.Stacks, &g.Globals, &g.Procs)
	if err := errors.Join(err1, err2); err != nil {
		return GC{}, true, fmt.Errorf("cannot parse gctrace line %q: %w", line, err)
	}
	d := func(i int) time.Duration { return time.Duration(ms[i] * float64(time.Millisecond)) }
	g.At = time.Duration(at * float64(time.Second))
	g.SweepTerm, g.Mark, g.MarkTerm = d(0), d(1), d(2)
	g.SweepTermCPU, g.AssistCPU, g.BackgroundCPU, g.IdleCPU, g.MarkTermCPU = d(3), d(4), d(5), d(6), d(7)
	return g, true, nil
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
