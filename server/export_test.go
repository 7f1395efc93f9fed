package server

import (
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/flightrec"
	"github.com/hongbao-io/hongbao/replicated"
)

// LeaveCluster closes the gateway's NATS connection and links, as its
// shutdown does before the admin API stops: GET /cluster/stats then answers
// 503.
func (s *Server) LeaveCluster() error { return s.closeCluster() }

// SlowAnswerCategory is the category of the trace event that marks a slow
// answer (-trace-slow), which perf/cmd/slowtrace looks for.
const SlowAnswerCategory = flightrec.Category

// RedactArgs is what /debug/pprof/cmdline shows of a command line.
var RedactArgs = admin.RedactArgs

// Snapshot takes a snapshot now, as -snapshot-every does.
func (s *Server) Snapshot() error { return s.snapshot() }

// SetSwitchHook sets what a move's target runs at points of its switch
// ("claimed"); nil: nothing.
func SetSwitchHook(f func(point string)) { replicated.SetSwitchHook(f) }

// SetRebalance sets -rebalance of a running gateway.
func (s *Server) SetRebalance(d time.Duration) { s.repl.SetRebalance(d) }

// SetCoreNATS makes a gateway's crossings and heartbeats go to NATS at url
// while its journal goes to -nats: a proxy in between can cut the one
// without the other.
func SetCoreNATS(o *Options, url string) { o.coreNATS = url }

// IgnoreGateway makes this gateway drop node's heartbeats, on both its
// connections, as if they came late.
func (s *Server) IgnoreGateway(node int) {
	s.node.Ignore(node)
	s.repl.IgnoreHeartbeatsOf(node)
}
