// Command benchring runs the ring benchmarks — our ring beside go-disruptor
// and a buffered channel, the wake-up latency of a parked consumer and the
// idle cost of parked stages — in one `go test` process, keeps its raw output
// in a file and prints the medians over -count runs as a Markdown table,
// checked against the ring's targets (shapeTargets and the bounds beside them).
//
// Run it from the module root: go run ./perf/cmd/benchring -count 5 -benchtime 1s
// (make bench-ring). One benchmark process at a time: the numbers are only
// meaningful on an otherwise idle machine.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

	"hongbao/perf/internal/harness"
)

// benchPattern selects the benchmarks of ring/ring_timing_test.go and
// ring/wake_timing_test.go.
const benchPattern = "BenchmarkRing|BenchmarkWakeLatency|BenchmarkIdleCost"

type config struct {
	count     int
	benchtime string
	out       string
}

// parseFlags parses args into a config; it reports every bad value.
func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var c config
	fs.IntVar(&c.count, "count", 5, "run each benchmark `n` times; the table shows the medians")
	fs.StringVar(&c.benchtime, "benchtime", "1s", "go test -benchtime: run each benchmark for `d` (a duration, or Nx iterations)")
	fs.StringVar(&c.out, "out", filepath.Join("perf", "out"), "write the raw benchmark output and the table into `dir`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: benchring [flags]\n\n"+
			"Runs go test -run '^$' -bench '%s' -benchmem ./ring/ once,\n"+
			"streams its output to DIR/bench-ring-<time>.txt and to stderr, and prints the\n"+
			"medians as a Markdown table with the targets (also written to DIR/bench-ring-<time>.md).\n"+
			"Run it from the module root.\n\nflags:\n", benchPattern)
		fs.PrintDefaults()
	}
	if err := harness.ParseArgs(fs, args); err != nil {
		return c, err
	}
	var bad harness.Problems
	bad.If(c.count < 1, "-count=%d: want at least 1", c.count)
	if err := checkBenchtime(c.benchtime); err != nil {
		bad.Add(err)
	}
	if c.out == "" {
		bad.Add(errors.New("-out: want a directory"))
	}
	return c, bad.Err()
}

// checkBenchtime accepts what go test -benchtime accepts: a positive duration
// or a positive iteration count followed by x.
func checkBenchtime(s string) error {
	if n, ok := strings.CutSuffix(s, "x"); ok {
		if v, err := strconv.Atoi(n); err != nil || v < 1 {
			return fmt.Errorf("-benchtime=%q: want a positive iteration count before x", s)
		}
		return nil
	}
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return fmt.Errorf("-benchtime=%q: want a positive duration such as 1s, or Nx", s)
	}
	return nil
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
	stamp := time.Now().Format("20060102-150405")
	rawPath := filepath.Join(c.out, "bench-ring-"+stamp+".txt")
	raw, err := os.Create(rawPath)
	if err != nil {
		return err
	}
	defer raw.Close()

	// -timeout: -count 5 of every row takes several minutes, past go test's
	// default of 10.
	args := []string{"test", "-run", "^$", "-bench", benchPattern, "-benchmem",
		"-count", strconv.Itoa(c.count), "-benchtime", c.benchtime, "-timeout", "60m", "./ring/"}
	fmt.Fprintf(stderr, "benchring: go %s\nbenchring: raw output → %s\n", shellQuote(args), rawPath)
	var parsed bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stdout = io.MultiWriter(raw, stderr, &parsed)
	cmd.Stderr = io.MultiWriter(raw, stderr)
	before, loadErr := snapshot()
	runErr := cmd.Run()
	after, _ := snapshot()
	load := "load of other processes unknown"
	if loadErr == nil {
		load = othersLoad(before, after, runtime.NumCPU())
	}

	results, err := parse(&parsed)
	if err != nil {
		return err
	}
	var table bytes.Buffer
	writeReport(&table, summarize(results), meta{
		machine: machine(),
		load:    load,
		command: fmt.Sprintf("`go run ./perf/cmd/benchring -count %d -benchtime %s`, which runs `go %s` (raw output: %s)",
			c.count, c.benchtime, shellQuote(args), rawPath),
	})
	if _, err := stdout.Write(table.Bytes()); err != nil {
		return err
	}
	mdPath := strings.TrimSuffix(rawPath, ".txt") + ".md"
	if err := os.WriteFile(mdPath, table.Bytes(), 0o644); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("go test: %w (see %s)", runErr, rawPath)
	}
	return nil
}

// machine describes this machine: CPUs, CPU model and Go version.
func machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %s %s/%s", runtime.NumCPU(), model, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// shellQuote renders args as a shell would need them.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " |^$*'\"\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
