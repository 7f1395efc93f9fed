// Command compare (make perf-compare) runs the same load against every
// ablation of the server and prints one table of ratios to the default
// pipeline. Every measurement is a fresh server and load client, and the
// variants are interleaved phase by phase so that the machine's noise falls
// on all alike. -help lists the flags and the variants.
package main

import "hongbao/perf/internal/harness"

func main() {
	harness.Main("perf-compare", parseFlags, config.bound, run)
}
