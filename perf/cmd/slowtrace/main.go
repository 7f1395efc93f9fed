// Command slowtrace reads the runtime traces a server writes with
// -trace-slow and says, for each slow answer in them, where the goroutine
// that wrote it spent the time from the request's decode to the end of the
// write. go tool trace shows the same window in full.
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

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

func main() {
	fs := flag.NewFlagSet("slowtrace", flag.ContinueOnError)
	top := fs.Int("top", 10, "print the `N` slowest answers of each file after its summary (0: every one)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: slowtrace FILE...

For each trace the server's -trace-slow wrote (data/traces/slow-*.trace by
default), the slow answers (overlapping ones as one) counted by what most of
their time went to, then the -top slowest: where the goroutine that wrote the
answer spent its decode → write window, by its state in the trace: running
("quiet": its longest stretch with no event, the thread off its CPU), in
syscalls (the longest and its function), runnable (waiting for a P) or
waiting (blocked or parked). On a busy machine a long syscall is mostly a
thread the kernel preempted there; many short ones are the loop's round of
reads and writes the answer waited behind. go tool trace FILE shows the
window in full (a log event of category "slow answer").

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	status := 0
	for _, path := range fs.Args() {
		if err := report(os.Stdout, path, *top); err != nil {
			fmt.Fprintf(os.Stderr, "slowtrace: %s: %v\n", path, err)
			status = 1
		}
	}
	os.Exit(status)
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
	byKind := map[string]int{}
	for _, s := range stalls {
		kind, _ := s.Cause()
		byKind[kind]++
	}
	kinds := &harness.Table{Right: true, Head: []string{"mostly", "slow answers"}}
	for _, k := range slices.SortedFunc(maps.Keys(byKind), func(a, b string) int { return cmp.Or(byKind[b]-byKind[a], strings.Compare(a, b)) }) {
		kinds.Add(k, fmt.Sprint(byKind[k]))
	}
	slowest := slices.SortedStableFunc(slices.Values(stalls), func(a, b Stall) int { return cmp.Compare(b.End-b.Start, a.End-a.Start) })
	if top > 0 && len(slowest) > top {
		slowest = slowest[:top]
	}
	t := &harness.Table{Head: []string{"decode → write", "goroutine", "overlapping", "running", "quiet", "syscall", "runnable", "waiting", "mostly", ""}}
	for _, s := range slowest {
		kind, detail := s.Cause()
		t.Add(time.Duration(s.End-s.Start).Round(time.Microsecond).String(), fmt.Sprintf("g%d", s.Goroutine), fmt.Sprint(s.Overlaps),
			ms(s.Running), ms(s.Quiet), ms(s.Syscall), ms(s.Runnable), ms(s.Waiting), kind, detail)
	}
	_, err = fmt.Fprintf(w, "%s: %d slow answers\n%s\nthe %d slowest:\n%s\n", path, len(stalls), kinds.Text(), len(slowest), t.Text())
	return err
}
