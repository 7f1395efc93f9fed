package main

import (
	"flag"
	"io"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// canned is go test -bench output as benchring gets it, cut down: three runs
// of two shapes, one wake-up latency row and two idle-cost rows, with the
// lines that are not results.
const canned = `goos: linux
goarch: amd64
pkg: github.com/hongbao-io/hongbao/ring
cpu: Intel(R) Xeon(R) Processor
BenchmarkRing/shape=1to1-claim16/impl=ring-2         	 9058612	        12.00 ns/op	        22.71 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=ring-spin-2    	 6885981	        19.45 ns/op	        27.93 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=disruptor-2    	 3411351	        10.00 ns/op	       824.3 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=chan-2         	 1856881	        70.00 ns/op	         1.000 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=ring-2         	 9058612	        10.00 ns/op	        22.71 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=disruptor-2    	 3411351	        10.00 ns/op	       824.3 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=chan-2         	 1856881	        60.00 ns/op	         1.000 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=ring-2         	 9058612	        14.00 ns/op	        22.71 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=disruptor-2    	 3411351	        10.00 ns/op	       824.3 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=1to1-claim16/impl=chan-2         	 1856881	        80.00 ns/op	         1.000 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=4to1-claim1/impl=ring-2          	 1000000	       100.0 ns/op	         3.000 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=4to1-claim1/impl=disruptor-2     	   10000	    479040 ns/op	         9.000 events/batch	       0 B/op	       0 allocs/op
BenchmarkRing/shape=4to1-claim1/impl=chan-2          	 1369965	       150.0 ns/op	         1.000 events/batch	       0 B/op	       0 allocs/op
--- BENCH: BenchmarkRing/shape=4to1-claim1/impl=chan-2
    ring_timing_test.go:1: a log line
BenchmarkWakeLatency/producer=sleeps/impl=ring-2         	     309	        45.0 max-us	        18.17 p50-us	        51.20 p99-us	       0 B/op	       0 allocs/op
BenchmarkIdleCost/impl=ring-2         	       1	         0.04137 %cpu	       0 B/op	       0 allocs/op
BenchmarkIdleCost/impl=disruptor-2    	       1	        68.54 %cpu	    6624 B/op	      69 allocs/op
BenchmarkBroken-2 	 notanumber	 1 ns/op
PASS
ok  	github.com/hongbao-io/hongbao/ring	9.314s
`

func TestParseLine(t *testing.T) {
	f := func(line, wantName string, wantProcs int, wantMetrics map[string]float64) {
		t.Helper()
		name, procs, metrics, ok := parseLine(line)
		if wantName == "" {
			if ok {
				t.Errorf("parseLine(%q) = %s %d %v; want no result", line, name, procs, metrics)
			}
			return
		}
		if !ok || name != wantName || procs != wantProcs || !maps.Equal(metrics, wantMetrics) {
			t.Fatalf("parseLine(%q) = %s %d %v %v; want %s procs %d metrics %v", line, name, procs, metrics, ok, wantName, wantProcs, wantMetrics)
		}
	}
	f("BenchmarkRing/shape=1to1-claim16/impl=ring-spin-2 \t 6885981\t 19.45 ns/op\t 27.93 events/batch\t 0 B/op\t 0 allocs/op",
		"BenchmarkRing/shape=1to1-claim16/impl=ring-spin", 2,
		map[string]float64{"ns/op": 19.45, "events/batch": 27.93, "B/op": 0, "allocs/op": 0})
	f("BenchmarkRing/shape=pipeline3/impl=ring \t 10\t 5 ns/op", // GOMAXPROCS=1: no suffix
		"BenchmarkRing/shape=pipeline3/impl=ring", 0, map[string]float64{"ns/op": 5})
	f("BenchmarkIdleCost/impl=ring-8 \t 1\t 0.04 %cpu", "BenchmarkIdleCost/impl=ring", 8, map[string]float64{"%cpu": 0.04})
	f("BenchmarkBroken-2 \t notanumber\t 1 ns/op", "", 0, nil)
	f("BenchmarkOdd-2 \t 10\t 1 ns/op\t 2", "", 0, nil)
	f("--- BENCH: BenchmarkRing/shape=4to1-claim1/impl=chan-2", "", 0, nil)
	f("goos: linux", "", 0, nil)
}

func TestReport(t *testing.T) {
	s, err := summarize(strings.NewReader(canned))
	if err != nil {
		t.Fatal(err)
	}
	if s.runs != 3 || s.procs != "2" || s.cpu != "Intel(R) Xeon(R) Processor" {
		t.Fatalf("summary: %d runs, GOMAXPROCS %s, cpu %q; want 3, 2, the cpu: line", s.runs, s.procs, s.cpu)
	}
	if st := s.stats["BenchmarkRing/shape=1to1-claim16/impl=ring ns/op"]; st.median != 12 || st.n != 3 || math.Abs(st.spread-2.0/12) > 1e-9 {
		t.Errorf("ring 1to1-claim16 ns/op %+v; want median 12 of 3 runs, spread 2/12", st)
	}
	got := report(s, harness.Para("Load: other processes used 3% of the 2 CPUs.")).Markdown()
	for _, want := range []string{
		// chan 70 / ring 12 = 5.83× ≥ 5×; ring 12 / disruptor 10 = 1.2× ≤ 1.5×.
		"| 1to1-claim16 (1 producer → 1 consumer, claim 16) | 12.0 ±17% | 10.0 ±0% | 70.0 ±14% | 19.4 | 5.83× (≥ 5×) PASS | 1.20× (≤ 1.5×) PASS | 0 PASS | 22.7 | PASS |",
		// chan 150 / ring 100 = 1.5× < 2×; far faster than go-disruptor.
		"| 4to1-claim1 (4 producers → 1 consumer, claim 1) | 100 | 479040 | 150 | — | 1.50× (≥ 2×) MISS | 0.00× (≤ 1.5×) PASS | 0 PASS | 3.0 | MISS: vs chan |",
		"| 1to1-claim1 (1 producer → 1 consumer, claim 1) | — | — | — | — | — | — | — | — | MISS: no chan/ring data, no go-disruptor/ring data, no allocs data |",
		"| sleeps | ring | 18.2 | 51.2 | 45 | p99 < 50 µs | MISS |",
		"| spins | ring | — | — | — | p99 < 50 µs | no data |",
		"| ring (WaitPark) | 0.04 | < 1 % | PASS |",
		"| go-disruptor (default wait: sleep-polls) | 68.54 | — | — |",
		"Load: other processes used 3% of the 2 CPUs.",
		"median of 3 runs",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks\n%s\ngot:\n%s", want, got)
		}
	}
}

func TestParseFlags(t *testing.T) {
	f := func(args []string, want config, wantErr string) {
		t.Helper()
		fs := flag.NewFlagSet("benchring", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got, err := parseFlags(fs, args)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("parseFlags(%q) error %v; want one containing %q", args, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Errorf("parseFlags(%q) = %+v, %v; want %+v", args, got, err, want)
		}
	}
	f(nil, config{count: 5, benchtime: "1s", out: "perf/out"}, "")
	f([]string{"-count", "1", "-benchtime", "100x", "-out", "/tmp/x"}, config{count: 1, benchtime: "100x", out: "/tmp/x"}, "")
	f([]string{"-count", "0"}, config{}, "-count=0")
	f([]string{"-benchtime", "soon"}, config{}, `-benchtime="soon"`)
	f([]string{"-benchtime", "0x"}, config{}, `-benchtime="0x"`)
	f([]string{"-count", "0", "-benchtime", "-1s"}, config{}, "-benchtime") // every problem reported
	f([]string{"extra"}, config{}, "unexpected arguments")
}
