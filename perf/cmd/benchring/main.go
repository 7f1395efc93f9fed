// Command benchring (make bench-ring) runs the ring benchmarks — our ring
// beside go-disruptor and a buffered channel, the wake-up latency of a parked
// consumer, the idle cost of parked stages — in one `go test` process and
// prints the medians against the ring's targets (shapeTargets and the bounds
// beside them). One benchmark process at a time, on an otherwise idle machine.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

// benchPattern selects the benchmarks of ring/ring_timing_test.go and
// ring/wake_timing_test.go.
const benchPattern = "BenchmarkRing|BenchmarkWakeLatency|BenchmarkIdleCost"

type config struct {
	count          int
	benchtime, out string
}

func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	fs.IntVar(&c.count, "count", 5, "run each benchmark `n` times; the table shows the medians")
	fs.StringVar(&c.benchtime, "benchtime", "1s", "go test -benchtime: run each benchmark for `d` (a duration, or Nx iterations)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the raw benchmark output and the table into `dir`")
	harness.Usage(fs, fmt.Sprintf("Runs go test -run '^$' -bench '%s' -benchmem ./ring/ once,\n"+
		"streams its output to DIR/bench-ring-<time>.txt and to stderr, and prints the\n"+
		"medians as a Markdown table with the targets (also written to DIR/bench-ring-<time>.md).\n"+
		"Run it from the module root.\n", benchPattern))
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.If(c.count < 1, "-count=%d: want at least 1", c.count)
	// What go test -benchtime accepts: a positive duration, or Nx.
	n, isN := strings.CutSuffix(c.benchtime, "x")
	v, errN := strconv.Atoi(n)
	d, errD := time.ParseDuration(c.benchtime)
	bad.If(isN && (errN != nil || v < 1) || !isN && (errD != nil || d <= 0), "-benchtime=%q: want a positive duration such as 1s, or Nx", c.benchtime)
	bad.If(c.out == "", "-out: want a directory")
	return c, bad.Err()
}

func main() {
	harness.Main("benchring", parseFlags, nil, func(_ context.Context, c config) error { return run(c, os.Stdout, os.Stderr) })
}

// run runs the benchmarks and prints the table to stdout. A failing go test
// still gets its table (of what it measured) before the error.
func run(c config, stdout, stderr io.Writer) error {
	if _, err := os.Stat(filepath.Join("ring", "ring_timing_test.go")); err != nil {
		return fmt.Errorf("run me from the module root (no ring/ring_timing_test.go here): %w", err)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	rawPath := filepath.Join(c.out, "bench-ring-"+time.Now().Format("20060102-150405")+".txt")
	raw, err := os.Create(rawPath)
	if err != nil {
		return err
	}
	defer raw.Close()

	// -timeout: -count 5 of every row takes longer than go test's default.
	args := []string{"test", "-run", "^$", "-bench", benchPattern, "-benchmem",
		"-count", strconv.Itoa(c.count), "-benchtime", c.benchtime, "-timeout", "60m", "./ring/"}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = harness.ShellQuote(a)
	}
	command := "go " + strings.Join(quoted, " ")
	fmt.Fprintf(stderr, "benchring: %s\nbenchring: raw output → %s\n", command, rawPath)
	var parsed bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stdout = io.MultiWriter(raw, stderr, &parsed)
	cmd.Stderr = io.MultiWriter(raw, stderr)
	load, runErr := runMeasured(cmd)
	sum, err := summarize(&parsed)
	if err != nil {
		return err
	}
	md := report(sum, harness.Para(fmt.Sprintf("Machine: %d CPUs (nproc), %s, %s %s/%s, GOMAXPROCS %s.",
		runtime.NumCPU(), sum.cpu, runtime.Version(), runtime.GOOS, runtime.GOARCH, sum.procs)),
		harness.Para("Load: "+load+"."),
		harness.Para(fmt.Sprintf("Command: `go run ./perf/cmd/benchring -count %d -benchtime %s`, which runs `%s` (raw output: %s).",
			c.count, c.benchtime, command, rawPath))).Markdown()
	fmt.Fprint(stdout, md)
	err = os.WriteFile(strings.TrimSuffix(rawPath, ".txt")+".md", []byte(md), 0o644)
	if runErr != nil {
		return fmt.Errorf("go test: %w (see %s)", runErr, rawPath)
	}
	return err
}

// runMeasured runs cmd and says how much CPU other processes took
// meanwhile: the machine's busy time less cmd's and its children's, in % of
// the machine, with the load average at the start.
func runMeasured(cmd *exec.Cmd) (string, error) {
	loadavg := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil && len(strings.Fields(string(b))) >= 3 {
		loadavg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	start := time.Now()
	busy0, err0 := harness.MachineBusy()
	err := cmd.Run()
	busy1, err1 := harness.MachineBusy()
	if err0 != nil || err1 != nil || cmd.ProcessState == nil {
		return "load of other processes unknown", err
	}
	// wait4's usage of go test includes the processes it waited for.
	others := busy1 - busy0 - cmd.ProcessState.UserTime() - cmd.ProcessState.SystemTime()
	cpus := runtime.NumCPU()
	pct := 100 * others.Seconds() / (time.Since(start).Seconds() * float64(cpus))
	return fmt.Sprintf("other processes used %.0f%% of the %d CPUs during the run (load average at the start: %s)", max(pct, 0), cpus, loadavg), err
}
