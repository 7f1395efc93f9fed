// Command compare (make perf-compare) runs the same load against every
// ablation of the server and prints one table of ratios to the default
// pipeline. Every measurement is a fresh server and load client, and the
// variants are interleaved phase by phase so that the machine's noise falls
// on all alike. -help lists the flags and the variants.
package main

import (
	"context"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
)

func main() {
	harness.Main("perf-compare", parseFlags, config.bound, run)
}

// noisePeriod is the cycle of each -noise goroutine: busy for -noise-busy of
// every noisePeriod.
const noisePeriod = 100 * time.Millisecond

// noise keeps n goroutines busy for busy of every noisePeriod until ctx
// ends: CPU taken in bursts, as by the other tenants of a shared machine,
// the same for every variant.
func noise(ctx context.Context, n int, busy time.Duration) {
	for range n {
		go func() {
			t := time.NewTicker(noisePeriod)
			defer t.Stop()
			for {
				for end := time.Now().Add(busy); time.Now().Before(end); {
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
}
