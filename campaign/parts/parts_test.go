package parts

import (
	"math/rand/v2"
	"testing"

	"github.com/hongbao-io/hongbao/campaign"
)

// The parts of a campaign add up to it exactly, whatever the gateways' shares
// of the SETs, and each part's rate deals its total.
func TestPartsAddUp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		shares := make([]int, 1+r.IntN(7))
		for i := range shares {
			shares[i] = r.IntN(40)
		}
		p := campaign.Params{Kind: campaign.Shake, Total: r.Uint64N(1 << 20), Rate: r.Uint64N(1 << 16)}
		var total, rate uint64
		for node := range shares {
			part := PartOf(p, node, shares)
			total += part.Total
			if part.Total > 0 && part.Rate == 0 {
				t.Fatalf("PartOf(%+v, %d, %v) = %+v: envelopes and no rate", p, node, shares, part)
			}
			if shares[node] == 0 && part.Total != 0 {
				t.Fatalf("PartOf(%+v, %d, %v) = %+v: a gateway without SETs deals", p, node, shares, part)
			}
			rate += part.Rate
		}
		sum := 0
		for _, k := range shares {
			sum += k
		}
		if sum > 0 && total != p.Total {
			t.Fatalf("parts of %+v over %v deal %d; want %d", p, shares, total, p.Total)
		}
		if sum > 0 && rate < p.Rate {
			t.Fatalf("parts of %+v over %v deal %d a second; want at least %d", p, shares, rate, p.Rate)
		}
	}
}
