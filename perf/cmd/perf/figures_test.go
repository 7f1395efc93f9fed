package main

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// The server's latency between two scrapes, from its histogram without
// labels and labelled by request type: every answer in both, the SHAKEs'
// alone only from the labelled one.
func TestServerLatency(t *testing.T) {
	scrape := func(text string) *harness.Sample {
		t.Helper()
		m, err := runlog.ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return &harness.Sample{Metrics: m}
	}
	plain0 := scrape("# TYPE hongbao_latency_seconds histogram\nhongbao_latency_seconds_bucket{le=\"0.001\"} 10\nhongbao_latency_seconds_bucket{le=\"+Inf\"} 10\n")
	plain1 := scrape("# TYPE hongbao_latency_seconds histogram\nhongbao_latency_seconds_bucket{le=\"0.001\"} 100\nhongbao_latency_seconds_bucket{le=\"+Inf\"} 110\n")
	all, shake := serverLatency(plain0, plain1)
	if runlog.Total(all) != 100 || shake != nil {
		t.Fatalf("unlabelled: every answer %v (want 100 observations), SHAKE %v (want nil)", all, shake)
	}

	typed := func(shake, open int) *harness.Sample {
		return scrape(strings.NewReplacer("S", strconv.Itoa(shake), "O", strconv.Itoa(open)).Replace(
			"# HELP hongbao_latency_seconds Ingress to egress.\n# TYPE hongbao_latency_seconds histogram\n" +
				"hongbao_latency_seconds_bucket{type=\"shake\",le=\"0.001\"} S\nhongbao_latency_seconds_bucket{type=\"shake\",le=\"+Inf\"} S\n" +
				"hongbao_latency_seconds_sum{type=\"shake\"} 0.5\nhongbao_latency_seconds_count{type=\"shake\"} S\n" +
				"hongbao_latency_seconds_bucket{type=\"open\",le=\"0.001\"} 0\nhongbao_latency_seconds_bucket{type=\"open\",le=\"+Inf\"} O\n" +
				"hongbao_latency_seconds_sum{type=\"open\"} 0.5\nhongbao_latency_seconds_count{type=\"open\"} O\n"))
	}
	all, shake = serverLatency(typed(5, 1), typed(105, 11))
	if runlog.Total(all) != 110 || runlog.Total(shake) != 100 {
		t.Fatalf("labelled: every answer %v (want 110), SHAKE %v (want 100)", all, shake)
	}
	if q := runlog.Quantile(shake, 0.99); q != 0.001 {
		t.Fatalf("SHAKE p99 = %v; want 0.001", q)
	}
	if q := runlog.Quantile(all, 0.99); !math.IsInf(q, 1) {
		t.Fatalf("every answer's p99 = %v; want +Inf (the OPENs are beyond the last bound)", q)
	}
}
