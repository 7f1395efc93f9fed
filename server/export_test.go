package server

// LeaveCluster closes the gateway's NATS connection and links, as its
// shutdown does before the admin API stops: GET /cluster/stats then answers
// 503.
func (s *Server) LeaveCluster() error { return s.closeCluster() }

// SlowAnswerCategory is the category of the trace event that marks a slow
// answer (-trace-slow), which perf/cmd/slowtrace looks for.
const SlowAnswerCategory = slowAnswerCategory

// RedactArgs is what /debug/pprof/cmdline shows of a command line.
var RedactArgs = redactArgs

// Snapshot takes a snapshot now, as -snapshot-every does.
func (s *Server) Snapshot() error { return s.snapshot() }
