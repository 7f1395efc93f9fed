package main

import (
	"bytes"
	"context"
	"runtime/trace"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAnalyze traces three slow answers of 30 ms, marked as the server marks
// them: one that slept (waiting), one that was in a syscall and one that spun,
// marked twice (the second mark overlapping the first).
func TestAnalyze(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("tracing is on already: %v", err)
	}
	const window = 30 * time.Millisecond
	mark := func() { trace.Log(context.Background(), markCategory, "30000") }
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(window)
		mark()
		ts := unix.NsecToTimespec(int64(window))
		unix.Nanosleep(&ts, nil)
		mark()
		for start := time.Now(); time.Since(start) < window; {
		}
		mark()
		mark()
	}()
	<-done
	trace.Stop()

	stalls, err := analyze(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(stalls) != 3 {
		t.Fatalf("%d stalls %+v; want 3", len(stalls), stalls)
	}
	for i, want := range []string{"waiting", "one syscall", "no event"} {
		s := stalls[i]
		if cause := s.Cause(); !strings.HasPrefix(cause, want) && !(i == 2 && strings.HasPrefix(cause, "running")) {
			t.Errorf("stall %d: cause %q; want %q", i, cause, want)
		}
		if got := time.Duration(s.End - s.Start); got != window {
			t.Errorf("stall %d: window %v; want %v", i, got, window)
		}
	}
	if s := stalls[1]; s.Syscalls != 1 || !strings.Contains(s.SysFunc, "Nanosleep") || time.Duration(s.LongestSys) < window*9/10 {
		t.Errorf("the syscall stall: %d syscalls, the longest %v in %q; want 1 of about %v in Nanosleep", s.Syscalls, time.Duration(s.LongestSys), s.SysFunc, window)
	}
	if s := stalls[2]; s.Overlaps != 1 || time.Duration(s.Running) < window*9/10 {
		t.Errorf("the spinning stall: %d overlapping, running %v; want 1, about %v", s.Overlaps, time.Duration(s.Running), window)
	}
}
