// Command compare (make perf-compare) runs the same load against the
// server's ablations, side by side in one run, and prints one table of
// ratios: the pipeline against the bare-I/O mode (-pipeline=none), epoll
// against netpoll ingress, our ring against go-disruptor and against
// channels between the same stage handlers, and the batched egress against
// one write per frame.
//
// Every measurement is a fresh server and a fresh load client, so that each
// one reconciles its money on its own and no run inherits another's heap;
// the measurements are ordered phase by phase (every variant at 30,000 QPS,
// then every variant at 60,000, …) so that the machine's noise falls on all
// variants alike. Run `compare -help` for the flags.
package main

import "hongbao/perf/internal/harness"

func main() {
	harness.Main("perf-compare", parseFlags, config.bound, run)
}
