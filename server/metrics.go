package server

import (
	"net/http"
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/exposition"
	"github.com/hongbao-io/hongbao/metrics"
)

// serveMetrics serves GET /metrics: the server's own families (package
// metrics), then the Go runtime's and the process's.
func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	metrics.Write(w, s.sources())
	exposition.WriteRuntime(w)
}

// serveConsoleData is GET /console/data: the live console's figures.
func (s *Server) serveConsoleData(w http.ResponseWriter, _ *http.Request) {
	admin.WriteJSON(w, http.StatusOK, metrics.LiveOf(s.sources(), time.Now()))
}

// sources are what /metrics and the console read.
func (s *Server) sources() metrics.Sources {
	return metrics.Sources{
		Pipeline: s.opts.Pipeline, Egress: s.opts.Egress, IngressMode: s.opts.Ingress,
		Sets: s.opts.Sets, MaxConns: s.maxConns,
		Stats: s.Stats(), Ledgers: s.ledgers(), Ingress: s.ing, Bus: s.bus, Campaigns: s.camps,
		SlowTrace: s.slowTrace, Journal: s.journal, Node: s.node, Replicated: s.repl,
		Recovery: s.recoveryTime, Snapshots: s.snapStats.count.Load(),
		SnapshotTime: time.Duration(s.snapStats.ns.Load()), SnapshotBytes: s.snapStats.bytes.Load(),
	}
}
