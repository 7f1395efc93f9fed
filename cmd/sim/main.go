// Command sim runs the seeded simulation of a replicated cluster (package
// sim) over many seeds, on every core: the seeds a second, the faults
// injected by kind, the transitions of the SETs' states the runs made, and
// for each seed that broke an invariant, the violation and the command
// that replays it (-seed N -trace). Exit status 1 if a seed failed, 2 for
// a bad command line.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/sim"
)

func main() {
	var cfg sim.Config
	seeds := flag.Uint64("seeds", 1000, "how many seeds to run, from -from")
	from := flag.Uint64("from", 1, "the first seed")
	one := flag.Uint64("seed", 0, "run this one seed only, and print its result (with -trace, its steps)")
	trace := flag.Bool("trace", false, "with -seed: print the run's steps (the last 400)")
	procs := flag.Int("procs", runtime.GOMAXPROCS(0), "seeds run at once")
	flag.IntVar(&cfg.Gateways, "gateways", 3, "gateways in the cluster")
	flag.IntVar(&cfg.Sets, "sets", 12, "the cluster's -sets")
	flag.DurationVar(&cfg.Lease, "lease", 1500*time.Millisecond, "the gateways' -lease")
	flag.DurationVar(&cfg.Faults, "faults", 40*time.Second, "simulated time with faults")
	flag.DurationVar(&cfg.Settle, "settle", 20*time.Second, "simulated time after, without faults, for the clients' retries to settle")
	flag.IntVar(&cfg.Rate, "rate", 40, "money requests a second while the faults last")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sim [flags]\n\nRuns the seeded simulation of a replicated cluster (docs/TESTING.md, The simulation).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *procs < 1 || cfg.Gateways < 2 || cfg.Sets < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if *one != 0 {
		r := sim.Run(*one, cfg)
		if *trace {
			fmt.Println(strings.Join(r.Trace, "\n"))
		}
		fmt.Println(r)
		fmt.Println("faults:", r.Faults)
		if r.Err != nil {
			os.Exit(1)
		}
		return
	}

	start := time.Now()
	var mu sync.Mutex
	faults, transitions := map[string]int{}, map[string]int{}
	var failed []sim.Result
	var steps int
	next := make(chan uint64)
	var wg sync.WaitGroup
	for range *procs {
		wg.Go(func() {
			for seed := range next {
				r := sim.Run(seed, cfg)
				mu.Lock()
				steps += r.Steps
				for k, n := range r.Faults {
					faults[k] += n
				}
				for k, n := range r.Transitions {
					transitions[k] += n
				}
				if r.Err != nil {
					failed = append(failed, r)
				}
				mu.Unlock()
			}
		})
	}
	for s := *from; s < *from+*seeds; s++ {
		next <- s
	}
	close(next)
	wg.Wait()
	took := time.Since(start)

	fmt.Printf("%d seeds in %v: %.0f seeds/s, %d steps, %d failed\n", *seeds, took.Round(time.Millisecond), float64(*seeds)/took.Seconds(), steps, len(failed))
	fmt.Println("\nfaults injected:")
	for _, k := range slices.Sorted(maps.Keys(faults)) {
		fmt.Printf("  %-10s %9d\n", k, faults[k])
	}
	fmt.Printf("\ntransitions of the SETs' states (%d kinds):\n", len(transitions))
	for _, k := range slices.Sorted(maps.Keys(transitions)) {
		fmt.Printf("  %-45s %9d\n", k, transitions[k])
	}
	slices.SortFunc(failed, func(a, b sim.Result) int { return int(a.Seed) - int(b.Seed) })
	for _, r := range failed {
		fmt.Printf("\nseed %d FAILED: %v\n  replay: go run ./cmd/sim -seed %d -trace\n", r.Seed, r.Err, r.Seed)
	}
	if len(failed) > 0 {
		os.Exit(1)
	}
}
