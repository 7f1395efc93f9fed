package loadclient

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// TestMetricsOpens checks that /metrics shows the OPENs sent again, the shares they learned
// and the opens under way.
func TestMetricsOpens(t *testing.T) {
	var c counters
	c.Resent, c.Learned, c.LearnedAmount, c.OpenPending, c.Repeated = 7, 5, 15, 2, 1
	set := metrics.NewSet()
	updateMetrics(set, c, 100)
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for _, want := range []string{"loadclient_open_resent_total 7\n", "loadclient_open_learned_total 5\n",
		"loadclient_open_learned_amount_total 15\n", "loadclient_opens_pending 2\n", "loadclient_pushes_repeated_total 1\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b.String())
		}
	}
}

// /metrics has the SHAKE latencies as a histogram whose buckets count what
// the report's histogram holds at each bound.
func TestMetricsLatency(t *testing.T) {
	r := &reporter{}
	live := new(LatencyHistogram)
	for _, ns := range []int64{300_000, 800_000, 1_500_000, 40_000_000, 3_000_000_000} {
		live.Record(ns)
	}
	r.shakes.Merge(live)
	var b bytes.Buffer
	r.writeLatency(&b)
	for _, want := range []string{`loadclient_shake_latency_seconds_bucket{le="0.0005"} 1`, `loadclient_shake_latency_seconds_bucket{le="0.001"} 2`,
		`loadclient_shake_latency_seconds_bucket{le="0.002"} 3`, `loadclient_shake_latency_seconds_bucket{le="0.05"} 4`,
		`loadclient_shake_latency_seconds_bucket{le="2"} 4`, `loadclient_shake_latency_seconds_bucket{le="5"} 5`,
		`loadclient_shake_latency_seconds_bucket{le="+Inf"} 5`, "loadclient_shake_latency_seconds_count 5"} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, b.String())
		}
	}
}
