package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/exp/trace"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// markCategory is the category of the log event the server makes for a
// slow answer (flightrec.Category, whose test checks the same string): its
// message is the answer's decode → write time in µs.
const markCategory = "slow answer"

// Stall is one slow answer: its window [Start, End] and where the goroutine
// that wrote the answer spent it, by its state in the trace.
type Stall struct {
	Start, End          trace.Time
	Goroutine           trace.GoID
	Running, Quiet      trace.Time // Quiet: the longest stretch of Running with no event, the thread off its CPU or computing
	Syscall, LongestSys trace.Time
	Syscalls            int
	SysFunc             string     // that made the longest syscall
	Runnable, Waiting   trace.Time // waiting for a P; blocked or parked
	Unknown             trace.Time // before the goroutine's first event: the window began before the trace
	Overlaps            int        // later slow answers whose windows overlap this one: the same stall
}

// Cause names what most of the window went to and the figures behind it.
func (s Stall) Cause() (kind, detail string) {
	type part struct {
		d            trace.Time
		kind, detail string
	}
	parts := []part{
		{s.Syscall, "a round of syscalls", fmt.Sprintf("%d syscalls, the longest %s in %s", s.Syscalls, ms(s.LongestSys), short(s.SysFunc))},
		{s.Quiet, "off its CPU", "no event for " + ms(s.Quiet) + " while running: its thread off the CPU, or computing"},
		{s.Runnable, "runnable", "waiting for a P " + ms(s.Runnable)},
		{s.Waiting, "waiting", "blocked or parked " + ms(s.Waiting)},
		{s.Running - s.Quiet, "running", ms(s.Running)},
		{s.Unknown, "before the trace", "the window began " + ms(s.Unknown) + " before the goroutine's first event"},
	}
	if 2*s.LongestSys > s.Syscall {
		parts[0] = part{s.Syscall, "one syscall in " + short(s.SysFunc), ms(s.LongestSys)}
	}
	best := slices.MaxFunc(parts, func(a, b part) int { return cmp.Compare(a.d, b.d) })
	return best.kind, best.detail
}

// analyze reads a runtime trace and returns its slow answers in time order,
// each overlapping run of them as one Stall (its first).
func analyze(r io.Reader) ([]Stall, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	changes := map[trace.GoID][]change{}
	var stalls []Stall
	for {
		e, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch e.Kind() {
		case trace.EventStateTransition:
			st := e.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				break
			}
			_, to := st.Goroutine()
			c := change{t: e.Time(), st: to}
			if to == trace.GoSyscall {
				for f := range st.Stack.Frames() {
					c.fn = f.Func
					break
				}
			}
			g := st.Resource.Goroutine()
			changes[g] = append(changes[g], c)
		case trace.EventLog:
			if l := e.Log(); l.Category == markCategory {
				us, err := strconv.ParseInt(l.Message, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("a %q event with message %q: %v", markCategory, l.Message, err)
				}
				stalls = append(stalls, Stall{Start: e.Time() - trace.Time(us*1000), End: e.Time(), Goroutine: e.Goroutine()})
			}
		default:
			// Any other event of a running goroutine breaks a quiet stretch.
			g := e.Goroutine()
			if cs := changes[g]; g != trace.NoGoroutine && len(cs) > 0 && cs[len(cs)-1].st == trace.GoRunning {
				changes[g] = append(cs, change{t: e.Time(), st: trace.GoRunning})
			}
		}
	}
	var merged []Stall
	for _, s := range stalls {
		if n := len(merged); n > 0 && s.Start < merged[n-1].End {
			merged[n-1].Overlaps++
			continue
		}
		account(&s, changes[s.Goroutine])
		merged = append(merged, s)
	}
	return merged, nil
}

// change is a goroutine's state from t on; any event of a running
// goroutine is one (st Running), so that a quiet stretch ends at it.
type change struct {
	t  trace.Time
	st trace.GoState
	fn string // entering a syscall: the function that made it
}

// account adds up s's goroutine's states over s's window from its changes.
func account(s *Stall, changes []change) {
	first := s.End
	if len(changes) > 0 {
		first = min(changes[0].t, s.End)
	}
	s.Unknown = max(first-s.Start, 0)
	for i := 0; i+1 < len(changes); i++ {
		c, next := changes[i], changes[i+1]
		a, b := max(c.t, s.Start), min(next.t, s.End)
		if b <= a {
			continue
		}
		d := b - a
		switch c.st {
		case trace.GoRunning:
			s.Running += d
			s.Quiet = max(s.Quiet, d)
		case trace.GoSyscall:
			s.Syscall += d
			s.Syscalls++
			if d > s.LongestSys {
				s.LongestSys, s.SysFunc = d, c.fn
			}
		case trace.GoRunnable:
			s.Runnable += d
		case trace.GoWaiting:
			s.Waiting += d
		}
	}
}

func ms(t trace.Time) string { return harness.Ms(int64(t)) }

// short drops a function name's package path.
func short(fn string) string {
	if fn == "" {
		return "?"
	}
	return fn[strings.LastIndexByte(fn, '/')+1:]
}
