package metrics

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/exposition"
	"github.com/hongbao-io/hongbao/ledger"
)

// The latency histograms' le labels are the ledger's bucket bounds, summed
// over the SETs and cumulative: two SHAKEs answered in 700 µs, one in each
// of two SETs, count from le="0.000768" up and not at le="0.00064".
func TestWriteLatencyBounds(t *testing.T) {
	ls := []*ledger.Ledger{new(ledger.Ledger), new(ledger.Ledger)}
	for _, l := range ls {
		l.Egress.LatencyBuckets[event.KShake-event.KLogin][ledger.LatencyBucket(700)].Add(1)
	}
	var b bytes.Buffer
	writeLatency(exposition.Writer{W: &b}, ls, "x_seconds", "help",
		func(c *ledger.EgressCounters) (*[ledger.RequestTypes][ledger.LatencyBuckets]atomic.Uint64, *[ledger.RequestTypes]atomic.Uint64) {
			return &c.LatencyBuckets, &c.LatencySumNs
		})
	for _, want := range []string{
		`x_seconds_bucket{type="shake",le="0.00064"} 0`,
		`x_seconds_bucket{type="shake",le="0.000768"} 2`,
		`x_seconds_bucket{type="shake",le="4.194304"} 2`,
		`x_seconds_bucket{type="shake",le="+Inf"} 2`,
		`x_seconds_count{type="shake"} 2`,
		`x_seconds_bucket{type="open",le="+Inf"} 0`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("no %s in\n%s", want, b.String())
		}
	}
	if n := strings.Count(b.String(), `x_seconds_bucket{type="shake"`); n != ledger.LatencyBuckets {
		t.Errorf("%d shake buckets; want %d, the last +Inf", n, ledger.LatencyBuckets)
	}
}
