package cluster

// Gauges for /metrics, read at scrape time.

// InFlight is the number of crossings waiting for their answer.
func (n *Node) InFlight() int { return n.cross.waiting() }

// Connected reports whether the NATS connection is up now.
func (n *Node) Connected() bool { return n.nc.IsConnected() }
