package campaign

import (
	"math/rand/v2"
	"testing"
)

// The SETs' shares of a campaign add up to it exactly, and a share with
// envelopes has a rate.
func TestSharesAddUp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		sets := 1 + r.IntN(64)
		p := Params{Kind: Shake, Total: 1 + r.Uint64N(1<<20), Rate: 1 + r.Uint64N(1<<16), Min: 1, Max: 9}
		var total, rate uint64
		for set := range sets {
			sh := ShareOf(p, set, sets)
			if sh.Total > 0 && sh.Rate == 0 || sh.Min != p.Min || sh.Max != p.Max || sh.Send {
				t.Fatalf("ShareOf(%+v, %d, %d) = %+v", p, set, sets, sh)
			}
			total += sh.Total
			rate += sh.Rate
		}
		if total != p.Total || rate < p.Rate {
			t.Fatalf("the shares of %+v over %d SETs deal %d at %d/s; want %d at ≥ %d/s", p, sets, total, rate, p.Total, p.Rate)
		}
	}
}
