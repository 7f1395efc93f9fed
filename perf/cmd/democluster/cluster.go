package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"hongbao/internal/embednats"
	"hongbao/perf/internal/harness"
)

// cluster is an embedded NATS server in this process and the gateway
// processes of the real server binary over it, on loopback.
type cluster struct {
	bin     string   // the server binary
	sets    int      // -sets of every gateway
	timeout string   // -cluster-timeout
	extra   []string // more server flags
	dir     string   // logs: gateway<i>.log (restarts append .<n>)
	echo    io.Writer

	nats     *embednats.Server
	natsPort int
	gws      []*gateway
}

// gateway is one gateway: its node number, its journal (kept across a
// restart) and its running process, nil while it is down.
type gateway struct {
	node     int
	data     string
	srv      *harness.Server
	restarts int
}

// startCluster starts NATS and n gateways and waits until every gateway
// sees every other up.
func startCluster(ctx context.Context, c *cluster, n int) error {
	ns, err := embednats.Start(0)
	if err != nil {
		return err
	}
	c.nats, c.natsPort = ns, ns.Port
	for i := range n {
		data, err := os.MkdirTemp("", fmt.Sprintf("hongbao-gw%d-", i))
		if err != nil {
			return err
		}
		c.gws = append(c.gws, &gateway{node: i, data: data})
	}
	for i := range n {
		if err := c.start(ctx, i); err != nil {
			return err
		}
	}
	return c.waitUp(15 * time.Second)
}

// start starts gateway i on its -data.
func (c *cluster) start(ctx context.Context, i int) error {
	g := c.gws[i]
	name := fmt.Sprintf("gateway%d.log", i)
	if g.restarts > 0 {
		name = fmt.Sprintf("gateway%d.%d.log", i, g.restarts)
	}
	args := []string{"-nats", c.natsURL(), "-node", fmt.Sprintf("%d/%d", i, len(c.gws)), "-sets", strconv.Itoa(c.sets),
		"-data", g.data}
	if c.timeout != "" {
		args = append(args, "-cluster-timeout", c.timeout)
	}
	srv, err := harness.Start(ctx, harness.ServerConfig{Bin: c.bin, Args: append(args, c.extra...),
		Log: filepath.Join(c.dir, name), Echo: c.echo, StartTimeout: 20 * time.Second})
	if err != nil {
		return fmt.Errorf("gateway %d: %w", i, err)
	}
	g.srv = srv
	return nil
}

func (c *cluster) natsURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort) }

// kill sends SIGKILL to gateway i and waits for it to exit.
func (c *cluster) kill(i int) {
	if g := c.gws[i]; g.srv != nil {
		g.srv.Kill()
		g.srv = nil
	}
}

// restart starts gateway i again on the same -data.
func (c *cluster) restart(ctx context.Context, i int) error {
	c.gws[i].restarts++
	return c.start(ctx, i)
}

// stopNATS shuts the embedded NATS server down.
func (c *cluster) stopNATS() {
	if c.nats != nil {
		c.nats.Stop()
		c.nats = nil
	}
}

// startNATS starts NATS again on the port it had, retrying while the port
// is not free yet.
func (c *cluster) startNATS() error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ns *embednats.Server
		if ns, err = embednats.Start(c.natsPort); err == nil {
			c.nats = ns
			return nil
		}
	}
	return err
}

// stop stops every running gateway with SIGTERM, then NATS; it returns
// the gateways that did not exit 0.
func (c *cluster) stop(timeout time.Duration) error {
	var bad []string
	for _, g := range c.gws {
		if g.srv != nil {
			if _, err := g.srv.Stop(timeout); err != nil {
				bad = append(bad, fmt.Sprintf("gateway %d: %v", g.node, err))
			}
			g.srv = nil
		}
	}
	c.stopNATS()
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

// cleanup kills what still runs and removes the journals.
func (c *cluster) cleanup() {
	for _, g := range c.gws {
		if g.srv != nil {
			g.srv.Kill()
		}
		os.RemoveAll(g.data)
	}
	c.stopNATS()
}

// admin returns gateway i's admin API.
func (c *cluster) admin(i int) *harness.Admin { return c.gws[i].srv.Admin }

// clusterMap is the part of GET /cluster read here.
type clusterMap struct {
	Node     int  `json:"node"`
	NATS     bool `json:"nats_connected"`
	InFlight int  `json:"crossings_in_flight"`
	Gateways []struct {
		Node int    `json:"node"`
		Addr string `json:"addr"`
		Up   bool   `json:"up"`
	} `json:"gateways"`
}

func readMap(a *harness.Admin) (clusterMap, error) {
	var m clusterMap
	b, err := a.Get("/cluster")
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	return m, err
}

// allUp reports whether every running gateway's GET /cluster shows every
// gateway up with its address.
func (c *cluster) allUp() bool {
	for _, g := range c.gws {
		if g.srv == nil {
			return false
		}
		m, err := readMap(g.srv.Admin)
		if err != nil || !m.NATS || len(m.Gateways) != len(c.gws) {
			return false
		}
		for _, gw := range m.Gateways {
			if !gw.Up || gw.Addr == "" {
				return false
			}
		}
	}
	return true
}

// waitUp waits until allUp.
func (c *cluster) waitUp(timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if c.allUp() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateways do not all see each other up after %v", timeout)
		}
	}
}

// clusterStats is GET /cluster/stats: the summed ledger and who answered.
type clusterStats struct {
	harness.Stats
	Gateways int   `json:"gateways"`
	Missing  []int `json:"missing"`
}

func readClusterStats(a *harness.Admin) (clusterStats, []byte, error) {
	var st clusterStats
	b, err := a.Get("/cluster/stats")
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, b, err
}

// crossingMetrics are a gateway's hongbao_cluster_* series and its
// goroutines, from /metrics.
type crossingMetrics struct {
	Sent, Received, Messages, TimedOut, Late, Misrouted, Malformed, PublishErrors float64
	InFlight, Up, NATS, Goroutines                                                float64
}

func readCrossings(a *harness.Admin) (crossingMetrics, error) {
	m, err := a.Metrics()
	if err != nil {
		return crossingMetrics{}, err
	}
	return crossingMetrics{
		Sent: m["hongbao_cluster_events_sent_total"], Received: m["hongbao_cluster_events_received_total"],
		Messages: m["hongbao_cluster_messages_sent_total"], TimedOut: m["hongbao_cluster_crossings_timed_out_total"],
		Late: m["hongbao_cluster_answers_late_total"], Misrouted: m["hongbao_cluster_misrouted_total"],
		Malformed: m["hongbao_cluster_malformed_total"], PublishErrors: m["hongbao_cluster_publish_errors_total"],
		InFlight: m["hongbao_cluster_crossings_in_flight"], Up: m["hongbao_cluster_gateways_up"],
		NATS: m["hongbao_cluster_nats_connected"], Goroutines: m["go_goroutines"],
	}, nil
}

// connections sums /stats connections and logins over the running gateways.
func (c *cluster) connections() (conns, logins int64) {
	for _, g := range c.gws {
		if g.srv == nil {
			continue
		}
		if st, _, err := g.srv.Admin.Stats(); err == nil {
			conns += st.Connections
			logins += st.Logins
		}
	}
	return conns, logins
}

// waitLogins waits until the gateways hold n connections between them.
func (c *cluster) waitLogins(n int64, timeout time.Duration) (int64, error) {
	var conns int64
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		conns, _ = c.connections()
		if conns >= n {
			return conns, nil
		}
		if time.Now().After(deadline) {
			return conns, fmt.Errorf("%d of %d users connected after %v", conns, n, timeout)
		}
	}
}
