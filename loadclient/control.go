package loadclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// serveControl serves the control API on addr until the returned stop is called:
//
//	GET /qps          the target rate now
//	GET /qps?set=N    total rate N from the next whole second at least 50 ms away
//	GET /metrics      the client's figures, Prometheus text (VictoriaMetrics/metrics)
func serveControl(addr string, src source, rt *rates, rep *reporter) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-control: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/qps", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		set := r.URL.Query().Get("set")
		if set == "" {
			json.NewEncoder(w).Encode(map[string]any{"qps": rt.at(time.Now().UnixNano())})
			return
		}
		q, err := strconv.ParseUint(set, 10, 32)
		if err != nil || q > MaxQPS {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("cannot parse set=%q: want a whole number of SHAKEs a second in [0, %d]", set, MaxQPS)})
			return
		}
		b := changeRate(src, rt, uint32(q))
		json.NewEncoder(w).Encode(map[string]any{"qps": q, "from": time.Unix(0, b).Format(time.RFC3339)})
	})
	set := metrics.NewSet()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		updateMetrics(set, rep.latest(), rt.at(time.Now().UnixNano()))
		set.WritePrometheus(w)
		rep.writeLatency(w)
		metrics.WriteProcessMetrics(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// updateMetrics copies the figures of the last tick into set.
func updateMetrics(set *metrics.Set, c counters, target uint32) {
	set.GetOrCreateGauge("loadclient_connections_up", nil).Set(float64(c.Up))
	set.GetOrCreateGauge("loadclient_connections_connecting", nil).Set(float64(c.Connecting))
	set.GetOrCreateGauge("loadclient_target_qps", nil).Set(float64(target))
	set.GetOrCreateCounter("loadclient_connects_total").Set(c.Connects)
	for k := range nReq {
		set.GetOrCreateCounter(fmt.Sprintf(`loadclient_requests_sent_total{type=%q}`, reqNames[k])).Set(c.Sent[k])
		set.GetOrCreateCounter(fmt.Sprintf(`loadclient_requests_lost_total{type=%q}`, reqNames[k])).Set(c.Lost[k])
		set.GetOrCreateCounter(fmt.Sprintf(`loadclient_requests_moved_total{type=%q}`, reqNames[k])).Set(c.NotDone[k])
		for s, n := range c.Status[k] {
			if n > 0 {
				set.GetOrCreateCounter(fmt.Sprintf(`loadclient_answers_total{type=%q,status="%d"}`, reqNames[k], s)).Set(n)
			}
		}
	}
	for p := range nPush {
		set.GetOrCreateCounter(fmt.Sprintf(`loadclient_pushes_total{type=%q}`, pushNames[p])).Set(c.Pushes[p])
	}
	for e := range nErr {
		set.GetOrCreateCounter(fmt.Sprintf(`loadclient_errors_total{class=%q}`, errNames[e])).Set(c.Errors[e])
	}
	set.GetOrCreateCounter("loadclient_skipped_total").Set(c.Skipped)
	set.GetOrCreateCounter("loadclient_churned_total").Set(c.Churned)
	set.GetOrCreateCounter("loadclient_redirected_total").Set(c.Redirected)
	set.GetOrCreateCounter("loadclient_outages_total").Set(c.Outages)
	set.GetOrCreateCounter("loadclient_moved_total").Set(c.Moved)
	set.GetOrCreateCounter("loadclient_reconnects_total").Set(c.Reconnects)
	set.GetOrCreateGauge("loadclient_outage_max_seconds", nil).Set(float64(c.OutageMaxNs) / float64(time.Second))
	set.GetOrCreateCounter("loadclient_shake_amount_total").Set(c.ShakeAmount)
	set.GetOrCreateCounter("loadclient_open_amount_total").Set(c.OpenAmount)
	set.GetOrCreateCounter("loadclient_open_resent_total").Set(c.Resent)
	set.GetOrCreateCounter("loadclient_open_learned_total").Set(c.Learned)
	set.GetOrCreateCounter("loadclient_open_learned_amount_total").Set(c.LearnedAmount)
	set.GetOrCreateGauge("loadclient_opens_pending", nil).Set(float64(c.OpenPending))
	set.GetOrCreateCounter("loadclient_pushes_repeated_total").Set(c.Repeated)
}
