package embednats

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hongbao-io/hongbao/internal/ports"
)

// JSClusterName is the cluster.name of every JSCluster: JetStream's Raft groups span
// the servers of one named cluster.
const JSClusterName = "embednats-js"

// JSCluster is N NATS servers inside the process, clustered with routes over loopback,
// each with JetStream on file storage synced at every write (sync_interval: always), so
// that a stream of 3 replicas outlives any one of them. A node can be killed (shut down)
// and restarted on its ports and store, for failover tests and demos. Its methods are
// safe for concurrent use.
type JSCluster struct {
	mu    sync.Mutex
	users []User
	nodes []*jsNode
}

// jsNode is one server of a JSCluster: what it keeps across a restart, and the running
// server, nil while it is down.
type jsNode struct {
	name        string // server_name: n0, n1, …
	port        int    // client port
	clusterPort int    // route port
	dir         string // JetStream store_dir
	srv         *server.Server
}

// StartJSCluster starts n servers (3 for a quorum that survives one of them) on free
// loopback ports, each with its JetStream store in root/<name>, with users only when users
// is not empty, each with its permissions (no users: open to every client). It returns once
// every server takes connections; WaitJetStream waits for the cluster's JetStream to form.
func StartJSCluster(n int, root string, users []User) (*JSCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("embedded NATS cluster: %d servers; want at least 1", n)
	}
	ps, err := ports.Free(2 * n)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS cluster: %w", err)
	}
	c := &JSCluster{users: users}
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		c.nodes = append(c.nodes, &jsNode{name: name, port: ps[2*i], clusterPort: ps[2*i+1], dir: filepath.Join(root, name)})
	}
	for i := range n {
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// options returns node i's configuration: the same at every start.
func (c *JSCluster) options(i int) (*server.Options, error) {
	nd := c.nodes[i]
	o := &server.Options{
		ServerName: nd.name,
		Host:       "127.0.0.1", Port: nd.port,
		NoLog: true, NoSigs: true,
		Cluster:    server.ClusterOpts{Name: JSClusterName, Host: "127.0.0.1", Port: nd.clusterPort},
		JetStream:  true,
		StoreDir:   nd.dir,
		SyncAlways: true,
	}
	for j, other := range c.nodes {
		if j == i {
			continue
		}
		u, err := url.Parse(fmt.Sprintf("nats-route://127.0.0.1:%d", other.clusterPort))
		if err != nil {
			return nil, err
		}
		o.Routes = append(o.Routes, u)
	}
	for _, u := range c.users {
		o.Users = append(o.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: u.Publish}, Subscribe: &server.SubjectPermission{Allow: u.Subscribe}}})
	}
	return o, nil
}

// start runs node i, waiting first for its ports to be free again (a restart right after
// a shutdown) and then until it takes connections.
func (c *JSCluster) start(i int) error {
	nd := c.nodes[i]
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		return fmt.Errorf("embedded NATS cluster: %w", err)
	}
	if err := ports.WaitFree(5*time.Second, nd.port, nd.clusterPort); err != nil {
		return fmt.Errorf("embedded NATS cluster: %s: %w", nd.name, err)
	}
	o, err := c.options(i)
	if err != nil {
		return fmt.Errorf("embedded NATS cluster: %s: %w", nd.name, err)
	}
	ns, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("embedded NATS cluster: %s: %w", nd.name, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embedded NATS cluster: %s not ready within 10s", nd.name)
	}
	nd.srv = ns
	return nil
}

// Len returns the number of nodes, up or down.
func (c *JSCluster) Len() int { return len(c.nodes) }

// Name returns node i's server_name, as JetStream names its peers (a stream's leader and
// replicas).
func (c *JSCluster) Name(i int) string { return c.nodes[i].name }

// NodeURL returns node i's client URL, whether it is up or not.
func (c *JSCluster) NodeURL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].port)
}

// URLs returns every node's client URL, in node order.
func (c *JSCluster) URLs() []string {
	var out []string
	for i := range c.nodes {
		out = append(out, c.NodeURL(i))
	}
	return out
}

// URL returns every node's client URL, comma-separated: what a NATS client takes to reach
// whichever node is up.
func (c *JSCluster) URL() string { return strings.Join(c.URLs(), ",") }

// Dir returns node i's JetStream store directory.
func (c *JSCluster) Dir(i int) string { return c.nodes[i].dir }

// Server returns node i's running server, nil while it is down.
func (c *JSCluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// Kill shuts node i down and waits until it has: its clients and routes are cut, its
// store stays for Restart. Killing a node that is down does nothing.
func (c *JSCluster) Kill(i int) {
	c.mu.Lock()
	ns := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts node i again on its ports and its store, once it is down; it rejoins the
// cluster and JetStream catches its replicas up.
func (c *JSCluster) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i].srv != nil {
		return fmt.Errorf("embedded NATS cluster: %s is running", c.nodes[i].name)
	}
	return c.start(i)
}

// Stop shuts every node down.
func (c *JSCluster) Stop() {
	for i := range c.nodes {
		c.Kill(i)
	}
}

// WaitJetStream waits until the running nodes' JetStream has formed: one of them is the
// meta leader, it sees every running node as a peer, and each is current with it. A stream
// created before may still be electing its own leader.
func (c *JSCluster) WaitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.jetStreamFormed()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded NATS cluster: JetStream not formed within %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jetStreamFormed says what keeps the running nodes' JetStream from being formed, if
// anything.
func (c *JSCluster) jetStreamFormed() error {
	c.mu.Lock()
	var running []*jsNode
	for _, nd := range c.nodes {
		if nd.srv != nil {
			running = append(running, nd)
		}
	}
	c.mu.Unlock()
	if len(running) == 0 {
		return errors.New("no node is running")
	}
	var leader *jsNode
	for _, nd := range running {
		if !nd.srv.JetStreamEnabled() {
			return fmt.Errorf("%s: JetStream not enabled", nd.name)
		}
		if nd.srv.JetStreamIsLeader() {
			leader = nd
		}
	}
	if leader == nil {
		return errors.New("no meta leader")
	}
	peers := map[string]bool{}
	for _, p := range leader.srv.JetStreamClusterPeers() {
		peers[p] = true
	}
	for _, nd := range running {
		if !peers[nd.name] {
			return fmt.Errorf("the meta leader %s does not see %s", leader.name, nd.name)
		}
		if !nd.srv.JetStreamIsCurrent() {
			return fmt.Errorf("%s not current with the meta leader", nd.name)
		}
	}
	return nil
}

// StartTestJSCluster starts an n-node JSCluster under tb's temporary directory, waits for
// its JetStream to form, and stops it at tb's cleanup (after the cleanups registered later).
func StartTestJSCluster(tb testing.TB, n int, users []User) *JSCluster {
	tb.Helper()
	c, err := StartJSCluster(n, tb.TempDir(), users)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	if err := c.WaitJetStream(30 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return c
}
