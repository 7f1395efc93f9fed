package runlog

import (
	"strings"
	"testing"
	"time"
)

func TestParseGCLine(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	f := func(line string, want GC) {
		t.Helper()
		got, ok, err := ParseGCLine(line)
		if err != nil || !ok {
			t.Fatalf("ParseGCLine(%q): ok %v, err %v; want a GC", line, ok, err)
		}
		if got != want {
			t.Fatalf("ParseGCLine(%q)\ngot  %+v\nwant %+v", line, got, want)
		}
	}
	f("gc 1 @0.002s 16%: 0.26+2.0+0.004 ms clock, 0.52+1.1/0.59/1.7+0.008 ms cpu, 3->4->3 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		GC{N: 1, At: 2 * time.Millisecond, Percent: 16,
			SweepTerm: ms(0.26), Mark: ms(2.0), MarkTerm: ms(0.004),
			SweepTermCPU: ms(0.52), AssistCPU: ms(1.1), BackgroundCPU: ms(0.59), IdleCPU: ms(1.7), MarkTermCPU: ms(0.008),
			HeapStart: 3, HeapEnd: 4, HeapLive: 3, Goal: 4, Procs: 2})
	f("gc 3 @2.065s 0%: 0.52+1.0+0.004 ms clock, 1.0+0/0.37/1.0+0.008 ms cpu, 9->9->8 MB, 17 MB goal, 1 MB stacks, 2 MB globals, 2 P (forced)",
		GC{N: 3, At: 2065 * time.Millisecond,
			SweepTerm: ms(0.52), Mark: ms(1.0), MarkTerm: ms(0.004),
			SweepTermCPU: ms(1.0), BackgroundCPU: ms(0.37), IdleCPU: ms(1.0), MarkTermCPU: ms(0.008),
			HeapStart: 9, HeapEnd: 9, HeapLive: 8, Goal: 17, Stacks: 1, Globals: 2, Procs: 2, Forced: true})
	// Go 1.26 may say it is checking for goroutine leaks after the percent.
	f("gc 12 @100.5s 2% (checking for goroutine leaks): 0.1+30+0.2 ms clock, 0.2+5/20/0+0.4 ms cpu, 120->130->60 MB, 125 MB goal, 3 MB stacks, 0 MB globals, 2 P",
		GC{N: 12, At: 100500 * time.Millisecond, Percent: 2,
			SweepTerm: ms(0.1), Mark: ms(30), MarkTerm: ms(0.2),
			SweepTermCPU: ms(0.2), AssistCPU: ms(5), BackgroundCPU: ms(20), MarkTermCPU: ms(0.4),
			HeapStart: 120, HeapEnd: 130, HeapLive: 60, Goal: 125, Stacks: 3, Procs: 2})
}

func TestParseGCLineNotGC(t *testing.T) {
	for _, line := range []string{"", `{"level":"INFO","msg":"serving"}`, "gcx 1", "scvg: 0 MB released"} {
		if _, ok, err := ParseGCLine(line); ok || err != nil {
			t.Fatalf("ParseGCLine(%q): ok %v, err %v; want not a GC line", line, ok, err)
		}
	}
}

func TestParseGCLineBad(t *testing.T) {
	for _, line := range []string{
		"gc 1 @0.002s 16%: 0.26+2.0 ms clock, 0.52+1.1/0.59/1.7+0.008 ms cpu, 3->4->3 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"gc 1 @0.002s 16%: 0.26+2.0+0.004 ms clock, 0.52+1.1/0.59+0.008 ms cpu, 3->4->3 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"gc 1 @0.002s 16%: 0.26+2.0+0.004 ms clock, 0.52+1.1/0.59/1.7+0.008 ms cpu, 3->4 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"gc 1 @0.002s 16%: 0.26+2.0+0.004 ms clock, 0.52+1.1/0.59/1.7+0.008 ms cpu, 3->4->3 MB, 4 MB goal, 0 MB stacks",
		"gc x @0.002s 16%: …",
		"gc 1 @0.002s 16%: 0.26+2.0+0.004 ms cl{\"level\":\"INFO\"}",
	} {
		if _, ok, err := ParseGCLine(line); !ok || err == nil {
			t.Fatalf("ParseGCLine(%q): ok %v, err %v; want an error", line, ok, err)
		}
	}
}

func TestParseGCTrace(t *testing.T) {
	log := `gc 1 @0.002s 16%: 0.26+2.0+0.004 ms clock, 0.52+1.1/0.59/1.7+0.008 ms cpu, 3->4->3 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
{"time":"2026-11-30T14:28:05Z","level":"INFO","msg":"serving"}
gc 2 @0.005s 16%: 0.33+4.5+0.004 ms clock, 0.66+1.1/0.75/0.17+0.008 ms cpu, 6->8->8 MB, 8 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 3 @0.9s 1%: 0.3{"level":"INFO"}
`
	gcs, bad, err := ParseGCTrace(strings.NewReader(log))
	if err != nil || len(gcs) != 2 || bad != 1 {
		t.Fatalf("ParseGCTrace: %d GCs, %d bad, err %v; want 2, 1, nil", len(gcs), bad, err)
	}
	if p := gcs[1].Pause(); p != 334*time.Microsecond {
		t.Fatalf("Pause of gc 2: got %v; want 334µs", p)
	}
	if c := gcs[1].CPU(); c != 2518*time.Microsecond {
		t.Fatalf("CPU of gc 2: got %v; want 2.518ms (idle marking excluded)", c)
	}
}
