// Command slowtrace reads the runtime traces a server writes with -trace-slow
// and says, for each slow answer in them, where the goroutine that wrote the
// answer spent the time from the request's decode to the end of the write:
// running, in a syscall (which), running with no event for a long stretch
// (the kernel took its thread off the CPU), runnable (the Go scheduler) or
// waiting. go tool trace shows the same window in full.
//
//	go run ./perf/cmd/slowtrace data/traces/slow-*.trace
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	fs := flag.NewFlagSet("slowtrace", flag.ContinueOnError)
	top := fs.Int("top", 10, "print the `N` slowest answers of each file after its summary (0: every one)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: slowtrace FILE...

Reads runtime traces written by the server's -trace-slow (files slow-*.trace
under -trace-dir, by default data/traces). For each file it counts the slow
answers (overlapping ones as one) by what most of their time went to, then
prints a line for each of the -top slowest: its decode → write time, and where
the goroutine that wrote it spent that window, by its state in the trace:

  running     on a thread with a P; "quiet" is the longest stretch of it with
              no trace event: the kernel took the thread off its CPU
  syscall     in the kernel; the longest one and the function that made it
  runnable    waiting for a P: the Go scheduler
  waiting     blocked or parked

and what most of the window went to. On a machine whose CPUs are all busy
(a load client on the same cores), a long syscall is mostly a thread the
kernel preempted there: a write on loopback wakes the reading client, whose
thread may take the CPU at once; many short ones are the loop's round of
reads and writes that the answer waited behind. Open a file with
go tool trace FILE to see the window in full (the slow answer is a log event
of category "slow answer" on the goroutine that wrote it).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range fs.Args() {
		if err := report(os.Stdout, path, *top); err != nil {
			fmt.Fprintf(os.Stderr, "slowtrace: %s: %v\n", path, err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// report prints the summary of one trace file and its top slowest answers
// (every one when top is 0).
func report(w io.Writer, path string, top int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	stalls, err := analyze(f)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d slow answers\n", path, len(stalls))
	byKind := map[string]int{}
	for _, s := range stalls {
		kind, _ := s.Cause()
		byKind[kind]++
	}
	kinds := slices.SortedFunc(maps.Keys(byKind), func(a, b string) int { return cmp.Or(byKind[b]-byKind[a], strings.Compare(a, b)) })
	for _, k := range kinds {
		fmt.Fprintf(w, "  %5d  mostly %s\n", byKind[k], k)
	}
	slowest := slices.SortedStableFunc(slices.Values(stalls), func(a, b Stall) int { return cmp.Compare(b.End-b.Start, a.End-a.Start) })
	if top > 0 && len(slowest) > top {
		slowest = slowest[:top]
		fmt.Fprintf(w, "  the %d slowest:\n", top)
	}
	for _, s := range slowest {
		also := ""
		if s.Overlaps > 0 {
			also = fmt.Sprintf(" (+%d overlapping)", s.Overlaps)
		}
		kind, detail := s.Cause()
		fmt.Fprintf(w, "  %8v on g%d%s: running %s (quiet %s), syscall %s, runnable %s, waiting %s; mostly %s: %s\n",
			time.Duration(s.End-s.Start).Round(time.Microsecond), s.Goroutine, also,
			ms(s.Running), ms(s.Quiet), ms(s.Syscall), ms(s.Runnable), ms(s.Waiting), kind, detail)
	}
	return nil
}
