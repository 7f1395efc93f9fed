package main

import (
	"bytes"
	"context"
	"runtime/trace"
	"strconv"
	"testing"
	"time"

	xtrace "golang.org/x/exp/trace"
	"golang.org/x/sys/unix"
)

// TestAnalyze traces three slow answers, each marked as the server marks one
// (its time measured by its own clock): one that slept (waiting), one that
// was in a read, and one that spun, marked twice (the second mark overlapping
// the first). What each window is made of is checked by the state the
// goroutine was in, not by which won: on a busy machine a woken goroutine
// may also wait for a P.
func TestAnalyze(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("tracing is on already: %v", err)
	}
	const window = 30 * time.Millisecond
	mark := func(start time.Time) {
		trace.Log(context.Background(), markCategory, strconv.FormatInt(time.Since(start).Microseconds(), 10))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		time.Sleep(window)
		mark(start)

		// A blocking read on a pipe, written to a window later: one syscall
		// (a signal restarts it, where it would cut a nanosleep short).
		var p [2]int
		if err := unix.Pipe(p[:]); err != nil {
			panic(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		start = time.Now() // before the timer: the read then takes a window at least
		time.AfterFunc(window, func() { unix.Write(p[1], []byte{1}) })
		unix.Read(p[0], make([]byte, 1))
		mark(start)

		start = time.Now()
		for time.Since(start) < window {
		}
		mark(start)
		mark(start)
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
	at := func(d xtrace.Time) time.Duration { return time.Duration(d) }
	if s := stalls[0]; at(s.Waiting) < window*9/10 {
		t.Errorf("the sleep: waiting %v; want about %v", at(s.Waiting), window)
	}
	if s := stalls[1]; s.Syscalls != 1 || at(s.LongestSys) < window*9/10 || s.SysFunc != "golang.org/x/sys/unix.read" {
		t.Errorf("the read: %d syscalls, the longest %v in %q; want 1 of about %v in unix.read", s.Syscalls, at(s.LongestSys), s.SysFunc, window)
	}
	if s := stalls[2]; s.Overlaps != 1 || at(s.Running+s.Runnable) < window*9/10 {
		t.Errorf("the spin: %d overlapping, running %v and runnable %v; want 1, about %v in all", s.Overlaps, at(s.Running), at(s.Runnable), window)
	}
	for i, s := range stalls {
		span := s.End - s.Start
		if got := at(span); got < window || got > 10*window {
			t.Errorf("stall %d: window %v; want the time measured, at least %v", i, got, window)
		}
		if parts := s.Running + s.Syscall + s.Runnable + s.Waiting + s.Unknown; parts > span || s.Quiet > s.Running || s.LongestSys > s.Syscall {
			t.Errorf("stall %d: states %+v add up to %v, over its window %v: time outside the window counted", i, s, at(parts), at(span))
		}
	}
}

// TestCause: the cause is the largest part of a window, one long syscall
// told from a round of short ones.
func TestCause(t *testing.T) {
	for _, c := range []struct {
		s    Stall
		want string
	}{
		{Stall{Waiting: 9, Runnable: 3, Running: 1}, "waiting"},
		{Stall{Runnable: 9, Waiting: 3}, "runnable"},
		{Stall{Running: 9, Quiet: 8}, "off its CPU"},
		{Stall{Running: 9, Quiet: 1, Waiting: 2}, "running"},
		{Stall{Syscall: 9, Syscalls: 1, LongestSys: 9, SysFunc: "golang.org/x/sys/unix.write"}, "one syscall in unix.write"},
		{Stall{Syscall: 9, Syscalls: 30, LongestSys: 2, SysFunc: "golang.org/x/sys/unix.write"}, "a round of syscalls"},
		{Stall{Unknown: 9, Running: 1}, "before the trace"},
	} {
		if kind, _ := c.s.Cause(); kind != c.want {
			t.Errorf("%+v: cause %q; want %q", c.s, kind, c.want)
		}
	}
}
