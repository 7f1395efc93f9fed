package main

import (
	"context"
	"time"
)

// noisePeriod is the cycle of each -noise goroutine: busy for -noise-busy of
// every noisePeriod.
const noisePeriod = 100 * time.Millisecond

// noise keeps n goroutines of this process each busy for busy of every
// noisePeriod until ctx ends: CPU taken in bursts, as the other tenants of a
// shared machine take it, so that the variants' tails can be compared on a
// machine short of CPU, every variant under the same noise.
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
