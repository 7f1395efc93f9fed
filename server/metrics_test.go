package server_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
)

// TestMetricsLint scrapes /metrics after a request of every type and lints
// it with Prometheus's own linter: every family has HELP text and a TYPE,
// counters end in _total, and so on.
func TestMetricsLint(t *testing.T) {
	ts := startServer(t, nil)
	a, b := login(t, ts, 1), login(t, ts, 2) // different SETs: some answers cross SETs
	a.ping()
	s := a.nextStamp()
	a.send(proto.AppendShake(nil, s))
	a.answer(s)
	s = a.nextStamp()
	a.send(proto.AppendChat(nil, s, b.user, []byte("hi")))
	a.answer(s)
	s = a.nextStamp()
	a.send(proto.AppendSend(nil, s, 100, []uint32{b.user}))
	_, env := a.answer(s).SendAck()
	s = b.nextStamp()
	b.send(proto.AppendOpen(nil, s, env))
	if st, _, _ := b.answer(s).OpenResult(); st != proto.OpenOK {
		t.Fatalf("OPEN: status %d; want %d", st, proto.OpenOK)
	}

	types := []string{"login", "shake", "open", "send", "chat", "ping"}
	var body []byte
	var families map[string]*dto.MetricFamily
	// The egress counts an answer's latency after writing it: the client may
	// read it first.
	waitFor(t, "a latency observation of every request type", func() bool {
		body, families = scrapeMetrics(t, ts)
		counts := map[string]float64{}
		if h := families["hongbao_latency_seconds"]; h != nil {
			for _, m := range h.Metric {
				counts[label(m, "type")] = float64(m.GetHistogram().GetSampleCount())
			}
		}
		for _, typ := range types {
			if counts[typ] == 0 {
				return false
			}
		}
		return true
	})

	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	h := families["hongbao_latency_seconds"]
	if h.GetType() != dto.MetricType_HISTOGRAM || len(h.Metric) != len(types) {
		t.Errorf("hongbao_latency_seconds: %v with %d series; want a histogram with one series per type of %q", h.GetType(), len(h.Metric), types)
	}
	for _, m := range h.Metric {
		if len(m.Label) != 1 || m.Label[0].GetName() != "type" {
			t.Errorf("hongbao_latency_seconds series labelled %v; want type only", m.Label)
		}
	}
	bi := families["hongbao_build_info"]
	if len(bi.GetMetric()) != 1 || bi.Metric[0].GetGauge().GetValue() != 1 ||
		label(bi.Metric[0], "version") == "" || label(bi.Metric[0], "revision") == "" || !strings.HasPrefix(label(bi.Metric[0], "goversion"), "go") {
		t.Errorf("hongbao_build_info: %v; want one series of 1 with version, revision and goversion", bi.GetMetric())
	}
	for name, f := range families {
		if strings.HasSuffix(name, "_total") && f.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: TYPE %v; want counter", name, f.GetType())
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no HELP text", name)
		}
	}
	for _, name := range []string{"hongbao_ring_occupancy", "hongbao_ring_capacity"} {
		if n := len(families[name].GetMetric()); n != ts.opts.Sets {
			t.Errorf("%s: %d series; want one per SET (%d)", name, n, ts.opts.Sets)
		}
	}
	for _, m := range families["hongbao_ring_capacity"].GetMetric() {
		if v := m.GetGauge().GetValue(); v != float64(ts.opts.Ring) {
			t.Errorf("hongbao_ring_capacity{set=%q} %g; want -ring %d", label(m, "set"), v, ts.opts.Ring)
		}
	}
	// One request of each type was read above, and none refused.
	for _, m := range families["hongbao_requests_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v < 1 {
			t.Errorf("hongbao_requests_total{type=%q} %g; want at least 1", label(m, "type"), v)
		}
	}
	if n := len(families["hongbao_requests_total"].GetMetric()); n != len(types) {
		t.Errorf("hongbao_requests_total: %d series; want one per type of %q", n, types)
	}
	for _, m := range families["hongbao_requests_overloaded_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v != 0 {
			t.Errorf("hongbao_requests_overloaded_total{type=%q} %g; want 0", label(m, "type"), v)
		}
	}
	// The SEND and the OPEN above each waited for a durable round (the SHAKE
	// found the pool empty: nothing to journal).
	if h := families["hongbao_journal_fsync_seconds"].GetMetric(); len(h) != 1 || h[0].GetHistogram().GetSampleCount() < 2 {
		t.Errorf("hongbao_journal_fsync_seconds: %v; want a histogram of at least 2 syncs", h)
	}
	for _, name := range []string{"hongbao_journal_records_total", "hongbao_journal_bytes_total"} {
		if m := families[name].GetMetric(); len(m) != 1 || m[0].GetCounter().GetValue() < 2 {
			t.Errorf("%s: %v; want at least 2", name, m)
		}
	}
}

// scrapeMetrics GETs /metrics and parses it.
func scrapeMetrics(t *testing.T, ts *testServer) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	code, body := ts.do(http.MethodGet, "/metrics", ts.token)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return body, families
}

// label returns the value of m's label name, "" if it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetricsLintCluster lints a gateway's /metrics after a crossing: the
// cluster's families are there, with HELP and TYPE, and count it.
func TestMetricsLintCluster(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 4
	gws := startGateways(t, embednats.StartTest(t), 2, sets, nil)
	a, b := login(t, gws[0], 2), login(t, gws[1], 1)
	s := a.nextStamp()
	a.send(proto.AppendChat(nil, s, b.user, []byte("hi")))
	if st, _ := a.answer(s).ChatAck(); st != proto.ChatHanded {
		t.Fatalf("CHAT across gateways: status %d; want %d", st, proto.ChatHanded)
	}
	b.push(proto.ChatDeliver)
	body, families := scrapeMetrics(t, gws[0])
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	value := func(name string) float64 {
		f := families[name]
		if f == nil || len(f.Metric) != 1 {
			t.Errorf("%s: %v; want one series", name, f)
			return 0
		}
		if f.GetType() == dto.MetricType_COUNTER {
			return f.Metric[0].GetCounter().GetValue()
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	for _, name := range []string{"hongbao_cluster_events_sent_total", "hongbao_cluster_events_received_total", "hongbao_cluster_messages_sent_total"} {
		if v := value(name); v < 1 { // the CHAT out, its answer back
			t.Errorf("%s %g; want at least 1 after a crossing", name, v)
		}
	}
	for _, name := range []string{"hongbao_cluster_publish_errors_total", "hongbao_cluster_crossings_timed_out_total", "hongbao_cluster_answers_late_total",
		"hongbao_cluster_misrouted_total", "hongbao_cluster_malformed_total", "hongbao_cluster_crossings_in_flight"} {
		if v := value(name); v != 0 {
			t.Errorf("%s %g; want 0", name, v)
		}
	}
	if v := value("hongbao_cluster_gateways_up"); v != 2 {
		t.Errorf("hongbao_cluster_gateways_up %g; want 2", v)
	}
	if v := value("hongbao_cluster_sets"); v != sets {
		t.Errorf("hongbao_cluster_sets %g; want -sets %d", v, sets)
	}
	if v := value("hongbao_cluster_nats_connected"); v != 1 {
		t.Errorf("hongbao_cluster_nats_connected %g; want 1", v)
	}
	if n := len(families["hongbao_ring_occupancy"].GetMetric()); n != sets/2 {
		t.Errorf("hongbao_ring_occupancy: %d series; want one per SET of this gateway (%d)", n, sets/2)
	}
	// A server without -nats has none of them.
	_, single := scrapeMetrics(t, startServer(t, nil))
	for name := range single {
		if strings.HasPrefix(name, "hongbao_cluster_") {
			t.Errorf("%s on a server without -nats", name)
		}
	}
}
