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
