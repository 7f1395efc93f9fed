package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cluster is gateway processes of the real server binary over NATS, on
// loopback. The tool starts NATS and stops it after the gateways.
type Cluster struct {
	Bin     string   // the server binary
	Sets    int      // -sets of every gateway
	Timeout string   // -cluster-timeout
	Extra   []string // more server flags
	Dir     string   // logs: gateway<i>.log (restarts: gateway<i>.<n>.log)
	Echo    io.Writer
	// NATS are the nats-server processes the gateways connect to, for
	// StopNATS and StartNATS and a report; URL, when set, is their address
	// instead (one URL or several, comma-separated).
	NATS *NATSServers
	URL  string
	// Auth gives the flags of gateway node's NATS identity, if any.
	Auth func(node int) []string
	// SamePorts makes a restart listen on the ports the gateway had, as a
	// supervisor restarts a process: the addresses the clients and the
	// other gateways hold stay good.
	SamePorts bool
	// Nodes is the gateways' -node N, the most the cluster will have (Join
	// adds them); 0: as many as Start starts.
	Nodes    int
	Gateways []*Gateway
}

// Gateway is one gateway: its node number, its journal (kept across a
// restart) and its running process, nil while it is down.
type Gateway struct {
	Node     int
	Data     string
	Srv      *Server
	Listen   string // its client address, kept across restarts with SamePorts
	AdminURL string
	restarts int
}

// Start starts n gateways at once and waits until every gateway sees every
// other up and, where SETs are claimed, runs its even share: the load must
// not begin among SETs still moving to even the cluster out.
func (c *Cluster) Start(ctx context.Context, n int) error {
	for i := range n {
		data, err := os.MkdirTemp("", fmt.Sprintf("hongbao-gw%d-", i))
		if err != nil {
			return err
		}
		c.Gateways = append(c.Gateways, &Gateway{Node: i, Data: data})
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.start(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.WaitUp(15 * time.Second); err != nil {
		return err
	}
	if err := c.WaitRunning(15 * time.Second); err != nil {
		return err
	}
	if i := slices.Index(c.Extra, "-rebalance"); i >= 0 && i+1 < len(c.Extra) && strings.HasPrefix(c.Extra[i+1], "-") {
		return nil // the gateways never even out by themselves
	}
	return c.WaitBalanced(60 * time.Second)
}

// metrics reads /metrics of every running gateway (nil for one that does
// not answer).
func (c *Cluster) metrics() []map[string]float64 {
	var out []map[string]float64
	for _, g := range c.Gateways {
		if g.Srv != nil {
			m, _ := g.Srv.Admin.Metrics()
			out = append(out, m)
		}
	}
	return out
}

// WaitBalanced waits until, where SETs are claimed, every running gateway
// runs its even share of them (the SETs over the gateways, rounded down or
// up) and none is moving: what -rebalance converges to.
func (c *Cluster) WaitBalanced(timeout time.Duration) error {
	return Poll(timeout, 100*time.Millisecond, func() error {
		var running []float64
		moving := 0.0
		for _, m := range c.metrics() {
			v, ok := m["hongbao_cluster_sets_running"]
			if !ok {
				return nil
			}
			running = append(running, v)
			moving += m["hongbao_cluster_moves_out"] + m["hongbao_cluster_moves_in"]
		}
		n := max(1, len(running))
		even := moving == 0
		for _, v := range running {
			even = even && int(v) >= c.Sets/n && int(v) <= (c.Sets+n-1)/n
		}
		if !even {
			return fmt.Errorf("the gateways run %v of the %d SETs, %.0f moving, after %v: not evened out", running, c.Sets, moving, timeout)
		}
		return nil
	})
}

// WaitRunning waits until the running gateways run every SET between them,
// where SETs are claimed (-journal jetstream: hongbao_cluster_sets_running);
// elsewhere each gateway's SETs run once it is up.
func (c *Cluster) WaitRunning(timeout time.Duration) error {
	return Poll(timeout, 50*time.Millisecond, func() error {
		n, claimed := 0.0, false
		for _, m := range c.metrics() {
			v, ok := m["hongbao_cluster_sets_running"]
			n, claimed = n+v, claimed || ok
		}
		if claimed && int(n) != c.Sets {
			return fmt.Errorf("the gateways run %.0f of the %d SETs after %v", n, c.Sets, timeout)
		}
		return nil
	})
}

func (c *Cluster) start(ctx context.Context, i int) error {
	g := c.Gateways[i]
	name := fmt.Sprintf("gateway%d.log", i)
	if g.restarts > 0 {
		name = fmt.Sprintf("gateway%d.%d.log", i, g.restarts)
	}
	nodes, url := c.Nodes, c.URL
	if nodes == 0 {
		nodes = len(c.Gateways)
	}
	if url == "" {
		url = c.NATS.URL()
	}
	args := []string{"-nats", url, "-node", fmt.Sprintf("%d/%d", i, nodes), "-sets", strconv.Itoa(c.Sets), "-data", g.Data}
	if c.Timeout != "" {
		args = append(args, "-cluster-timeout", c.Timeout)
	}
	if c.Auth != nil {
		args = append(args, c.Auth(i)...)
	}
	if c.SamePorts && g.Listen != "" {
		args = append(args, "-listen", g.Listen, "-admin", strings.TrimPrefix(g.AdminURL, "http://"))
	}
	srv, err := Start(ctx, ServerConfig{Bin: c.Bin, Args: append(args, c.Extra...),
		Log: filepath.Join(c.Dir, name), Echo: c.Echo, StartTimeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("gateway %d: %w", i, err)
	}
	g.Srv, g.Listen, g.AdminURL = srv, srv.Listen, srv.Admin.URL
	return nil
}

// Addrs are the gateways' client addresses, and AdminURLs their admin
// APIs', the last each had (of a gateway that is down too).
func (c *Cluster) Addrs() []string {
	var out []string
	for _, g := range c.Gateways {
		out = append(out, g.Listen)
	}
	return out
}

func (c *Cluster) AdminURLs() []string {
	var out []string
	for _, g := range c.Gateways {
		out = append(out, g.AdminURL)
	}
	return out
}

// Kill sends SIGKILL to gateway i and waits for it to exit.
func (c *Cluster) Kill(i int) {
	if g := c.Gateways[i]; g.Srv != nil {
		g.Srv.Kill()
		g.Srv = nil
	}
}

// Join starts one more gateway, the next node number (below Nodes), and
// returns it once every running gateway sees it up.
func (c *Cluster) Join(ctx context.Context) (*Gateway, error) {
	i := len(c.Gateways)
	if c.Nodes > 0 && i >= c.Nodes {
		return nil, fmt.Errorf("a cluster of -node N=%d has no node %d", c.Nodes, i)
	}
	data, err := os.MkdirTemp("", fmt.Sprintf("hongbao-gw%d-", i))
	if err != nil {
		return nil, err
	}
	g := &Gateway{Node: i, Data: data}
	c.Gateways = append(c.Gateways, g)
	if err := c.start(ctx, i); err != nil {
		return g, err
	}
	return g, c.WaitUp(15 * time.Second)
}

// Restart starts gateway i again on the same -data.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.Gateways[i].restarts++
	return c.start(ctx, i)
}

// StopNATS kills every server of NATS with SIGKILL; StartNATS starts them
// again on their ports.
func (c *Cluster) StopNATS() {
	for i := range c.NATS.Len() {
		c.NATS.Kill(i)
	}
}

func (c *Cluster) StartNATS() error {
	for i := range c.NATS.Len() {
		if err := c.NATS.Restart(i); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every running gateway with SIGTERM; it returns the gateways
// that did not exit 0.
func (c *Cluster) Stop(timeout time.Duration) error {
	var bad []error
	for _, g := range c.Gateways {
		if g.Srv != nil {
			if _, err := g.Srv.Stop(timeout); err != nil {
				bad = append(bad, fmt.Errorf("gateway %d: %v", g.Node, err))
			}
			g.Srv = nil
		}
	}
	return errors.Join(bad...)
}

// Cleanup kills the gateways that still run and removes the journals.
func (c *Cluster) Cleanup() {
	for _, g := range c.Gateways {
		if g.Srv != nil {
			g.Srv.Kill()
		}
		os.RemoveAll(g.Data)
	}
}

// Admin returns gateway i's admin API.
func (c *Cluster) Admin(i int) *Admin { return c.Gateways[i].Srv.Admin }

// ClusterMap is GET /cluster: the gateways as one of them sees them.
type ClusterMap struct {
	NATS     bool `json:"nats_connected"`
	Gateways []struct {
		Node int    `json:"node"`
		Addr string `json:"addr"`
		Sets []int  `json:"sets"`
		Up   bool   `json:"up"`
	} `json:"gateways"`
}

// ReadClusterMap reads GET /cluster.
func ReadClusterMap(a *Admin) (m ClusterMap, err error) {
	err = a.getJSON("/cluster", &m)
	return m, err
}

// Owners is each SET's gateway by m (-1: none).
func (m *ClusterMap) Owners(sets int) []int {
	out := slices.Repeat([]int{-1}, sets)
	for _, g := range m.Gateways {
		for _, s := range g.Sets {
			if s >= 0 && s < sets {
				out[s] = g.Node
			}
		}
	}
	return out
}

// WaitUp waits until every running gateway's GET /cluster shows every
// running gateway up with its address.
func (c *Cluster) WaitUp(timeout time.Duration) error {
	return Poll(timeout, 50*time.Millisecond, func() error {
		notUp := fmt.Errorf("the gateways do not all see each other up after %v", timeout)
		running := map[int]bool{}
		for _, g := range c.Gateways {
			if g.Srv != nil {
				running[g.Node] = true
			}
		}
		for _, g := range c.Gateways {
			if g.Srv == nil {
				continue
			}
			m, err := ReadClusterMap(g.Srv.Admin)
			if err != nil || !m.NATS {
				return notUp
			}
			seen := 0
			for _, gw := range m.Gateways {
				if running[gw.Node] {
					if !gw.Up || gw.Addr == "" {
						return notUp
					}
					seen++
				}
			}
			if seen != len(running) {
				return notUp
			}
		}
		if len(running) == 0 {
			return notUp
		}
		return nil
	})
}

// ClusterStats is GET /cluster/stats: the summed ledger and who answered.
type ClusterStats struct {
	Stats
	Gateways int   `json:"gateways"`
	Missing  []int `json:"missing"`
}

// ReadClusterStats reads GET /cluster/stats.
func ReadClusterStats(a *Admin) (st ClusterStats, err error) {
	err = a.getJSON("/cluster/stats", &st)
	return st, err
}

// Money is the cluster's money told, got_amount + opened_amount of
// /cluster/stats, read from a running gateway other than not (-1: any),
// once no gateway is missing from it (within timeout); with the stats.
func (c *Cluster) Money(not int, timeout time.Duration) (int64, ClusterStats, error) {
	var cs ClusterStats
	err := Poll(timeout, 100*time.Millisecond, func() error {
		err := errors.New("no gateway answers")
		for _, g := range c.Gateways {
			if g.Srv == nil || g.Node == not {
				continue
			}
			if cs, err = ReadClusterStats(g.Srv.Admin); err == nil && len(cs.Missing) > 0 {
				err = fmt.Errorf("gateways %v missing from /cluster/stats", cs.Missing)
			}
			if err == nil {
				return nil
			}
		}
		return err
	})
	if err != nil {
		return 0, cs, err
	}
	return cs.Shake.GotAmount + cs.Envelopes.OpenedAmount, cs, nil
}

// Settled is the cluster's Money at the end of a run, read again for up to
// 10 s until both ledger invariants hold (a gateway may still be applying
// what it took over), with the ledger's checks.
func (c *Cluster) Settled() (money int64, cs ClusterStats, checks []LedgerCheck, err error) {
	Poll(10*time.Second, 100*time.Millisecond, func() error {
		money, cs, err = c.Money(-1, 5*time.Second)
		checks = LedgerChecks(&cs.Stats, nil)
		if err != nil || len(FailedChecks(checks)) > 0 {
			return errors.New("not settled")
		}
		return nil
	})
	return money, cs, checks, err
}

// Crossings are a gateway's hongbao_cluster_* series and its goroutines,
// from /metrics.
type Crossings struct {
	Sent, Received, Messages, TimedOut, Late, Misrouted, Malformed, PublishErrors float64
	InFlight, Up, NATS, Goroutines                                                float64
}

// ReadCrossings reads a gateway's Crossings.
func ReadCrossings(a *Admin) (Crossings, error) {
	m, err := a.Metrics()
	return Crossings{
		Sent: m["hongbao_cluster_events_sent_total"], Received: m["hongbao_cluster_events_received_total"],
		Messages: m["hongbao_cluster_messages_sent_total"], TimedOut: m["hongbao_cluster_crossings_timed_out_total"],
		Late: m["hongbao_cluster_answers_late_total"], Misrouted: m["hongbao_cluster_misrouted_total"],
		Malformed: m["hongbao_cluster_malformed_total"], PublishErrors: m["hongbao_cluster_publish_errors_total"],
		InFlight: m["hongbao_cluster_crossings_in_flight"], Up: m["hongbao_cluster_gateways_up"],
		NATS: m["hongbao_cluster_nats_connected"], Goroutines: m["go_goroutines"],
	}, err
}

// Logins sums the logged-in connections of the running gateways.
func (c *Cluster) Logins() int64 {
	var n int64
	for _, g := range c.Gateways {
		if g.Srv != nil {
			n += g.Srv.Admin.Logins()
		}
	}
	return n
}
