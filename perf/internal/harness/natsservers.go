package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/internal/ports"
	"github.com/hongbao-io/hongbao/jsjournal"
)

// NATSUser is a user of NATSServers: its name, password and the subjects
// it may publish and subscribe to (none: all).
type NATSUser struct {
	Name, Password     string
	Publish, Subscribe []string
}

// NATSServers are real nats-server processes (bin/nats-server, which make
// build builds from the nats-server module) clustered over loopback, with
// JetStream, when they have a store, synced at every write as
// deploy/nats/nats-server-js.conf runs it: a server can be killed with
// SIGKILL, as a machine dies, and started again on its ports and store.
// Its methods are safe for concurrent use.
type NATSServers struct {
	bin, dir, store string

	mu    sync.Mutex
	nodes []*natsProc
}

type natsProc struct {
	name                   string
	port, cluster, monitor int
	conf, log              string
	cmd                    *exec.Cmd
	done                   chan struct{}
	starts                 int
}

// StartNATSServers starts n servers of bin, their configurations and logs
// in dir, with users (none: open to every client), and waits until every
// one takes connections. With a store, each runs JetStream under it
// (WaitJetStream waits for it to form); without, none does.
func StartNATSServers(bin, dir, store string, n int, users []NATSUser) (*NATSServers, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w (make build builds it from the nats-server module)", bin, err)
	}
	ps, err := ports.Free(3 * n)
	if err != nil {
		return nil, err
	}
	c := &NATSServers{bin: bin, dir: dir, store: store}
	for i := range n {
		c.nodes = append(c.nodes, &natsProc{name: fmt.Sprintf("n%d", i), port: ps[3*i], cluster: ps[3*i+1], monitor: ps[3*i+2]})
	}
	for i, nd := range c.nodes {
		nd.conf = filepath.Join(dir, nd.name+".conf")
		if err := os.WriteFile(nd.conf, c.config(i, users), 0o600); err != nil {
			return nil, err
		}
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// config is server i's configuration file.
func (c *NATSServers) config(i int, users []NATSUser) []byte {
	nd := c.nodes[i]
	q := func(v any) string { // JSON, which the configuration's syntax takes, with > as it is
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		e.Encode(v)
		return strings.TrimSpace(b.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", nd.name, nd.port, nd.monitor)
	if c.store != "" {
		fmt.Fprintf(&b, "jetstream { store_dir: %s, sync_interval: always }\n", q(filepath.Join(c.store, nd.name)))
	}
	if len(c.nodes) > 1 {
		var routes []string
		for j, o := range c.nodes {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.cluster))
			}
		}
		fmt.Fprintf(&b, "cluster { name: hongbao, listen: 127.0.0.1:%d, routes: %s }\n", nd.cluster, q(routes))
	}
	if len(users) > 0 {
		b.WriteString("authorization { users: [\n")
		for _, u := range users {
			fmt.Fprintf(&b, "  {user: %s, password: %s", q(u.Name), q(u.Password))
			if len(u.Publish) > 0 || len(u.Subscribe) > 0 {
				fmt.Fprintf(&b, ", permissions: {publish: %s, subscribe: %s}", q(u.Publish), q(u.Subscribe))
			}
			b.WriteString("}\n")
		}
		b.WriteString("] }\n")
	}
	return []byte(b.String())
}

// start runs server i once its ports are free again, and waits until it
// takes connections.
func (c *NATSServers) start(i int) error {
	nd := c.nodes[i]
	if err := ports.WaitFree(5*time.Second, nd.port, nd.cluster, nd.monitor); err != nil {
		return fmt.Errorf("NATS server %s: %w", nd.name, err)
	}
	nd.log = filepath.Join(c.dir, nd.name+".log")
	if nd.starts > 0 {
		nd.log = filepath.Join(c.dir, fmt.Sprintf("%s.%d.log", nd.name, nd.starts))
	}
	nd.starts++
	out, err := os.Create(nd.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, "-c", nd.conf)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("NATS server %s: %w", nd.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(done) }()
	nd.cmd, nd.done = cmd, done
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", nd.port), time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("NATS server %s exited at its start (log: %s)", nd.name, nd.log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NATS server %s takes no connection after 10s (log: %s)", nd.name, nd.log)
		}
	}
}

// Len is the number of servers, up or down.
func (c *NATSServers) Len() int { return len(c.nodes) }

// Name is server i's server_name, as JetStream names a stream's leader.
func (c *NATSServers) Name(i int) string { return c.nodes[i].name }

// PID is server i's process id, 0 while it is down.
func (c *NATSServers) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nd := c.nodes[i]; nd.cmd != nil {
		return nd.cmd.Process.Pid
	}
	return 0
}

// URL is every server's client URL, comma-separated: what a client takes to
// reach whichever is up.
func (c *NATSServers) URL() string {
	var urls []string
	for _, nd := range c.nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nd.port))
	}
	return strings.Join(urls, ",")
}

// CommandLine is server i's start as a shell line.
func (c *NATSServers) CommandLine(i int) string { return c.bin + " -c " + c.nodes[i].conf }

// Kill kills server i with SIGKILL and waits for it: what it had not synced
// is lost with it, its store stays for Restart. A server that is down is
// left as it is.
func (c *NATSServers) Kill(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	cmd, done := nd.cmd, nd.done
	nd.cmd = nil
	c.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Restart starts server i again on its ports and store.
func (c *NATSServers) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[i].cmd != nil {
		return fmt.Errorf("NATS server %s is running", c.nodes[i].name)
	}
	return c.start(i)
}

// Stop ends every server: SIGTERM, then SIGKILL after 5 s.
func (c *NATSServers) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		nd.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-nd.done:
		case <-time.After(5 * time.Second):
			nd.cmd.Process.Signal(syscall.SIGKILL)
			<-nd.done
		}
		nd.cmd = nil
	}
}

// get GETs path from the monitoring port of every running server, in
// order, until fn returns true; a server that does not answer 200 gets
// code and body of what it said (0 when nothing).
func (c *NATSServers) get(ctx context.Context, path string, fn func(nd *natsProc, code int, body []byte) bool) {
	c.mu.Lock()
	var up []*natsProc
	for _, nd := range c.nodes {
		if nd.cmd != nil {
			up = append(up, nd)
		}
	}
	c.mu.Unlock()
	for _, nd := range up {
		code, body := 0, []byte(nil)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d%s", nd.monitor, path), nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			body, _ = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
			resp.Body.Close()
			code = resp.StatusCode
		}
		cancel()
		if fn(nd, code, body) {
			return
		}
	}
}

// WaitJetStream waits until every running server's /healthz says its
// JetStream is current with the cluster's.
func (c *NATSServers) WaitJetStream(ctx context.Context, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		var bad []string
		c.get(ctx, "/healthz", func(nd *natsProc, code int, body []byte) bool {
			if code != http.StatusOK {
				bad = append(bad, fmt.Sprintf("%s: %d %s", nd.name, code, strings.TrimSpace(string(body))))
			}
			return false
		})
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("NATS JetStream not current within %v: %s", timeout, strings.Join(bad, "; "))
		}
	}
}

// StreamLeader is the server that leads stream, by the first running
// server's /jsz that names one; -1 if none does.
func (c *NATSServers) StreamLeader(ctx context.Context, stream string) int {
	leader := -1
	c.get(ctx, "/jsz?accounts=true&streams=true", func(_ *natsProc, code int, body []byte) bool {
		var jsz struct {
			Accounts []struct {
				Streams []struct {
					Name    string `json:"name"`
					Cluster struct {
						Leader string `json:"leader"`
					} `json:"cluster"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &jsz) != nil {
			return false
		}
		for _, a := range jsz.Accounts {
			for _, s := range a.Streams {
				for i, n := range c.nodes {
					if s.Name == stream && s.Cluster.Leader == n.name {
						leader = i
						return true
					}
				}
			}
		}
		return false
	})
	return leader
}

// StartGatewaysNATS starts n nats-server processes for l's gateways, with a
// NATS user for each (their identities are returned) and the users more.
// With l.Replicas above 0 the servers run JetStream, each store in a
// temporary directory, the gateways' users get its permissions too
// (cluster.JetStreamPermissions), and an operator (deploy/nats's admin:
// cluster.OperatorPermissions) provisions l, as jsadmin provision does,
// before any gateway starts; with 0, no JetStream, and each gateway's user
// may use its own subjects only (cluster.Permissions). Each server's command
// line, and the provisioning's, is a step of the run. stop stops them and
// removes the stores.
func (r *Run) StartGatewaysNATS(ctx context.Context, bin string, n int, l jsjournal.Layout, more ...NATSUser) (ids []Identity, js *NATSServers, stop func(), err error) {
	perms := func(node int) ([]string, []string) { return cluster.Permissions(l.Prefix, node) }
	store, users := "", more
	if l.Replicas > 0 {
		perms = func(node int) ([]string, []string) { return cluster.JetStreamPermissions(l.Prefix, node, l.Gateways) }
		if store, err = os.MkdirTemp("", r.Name+"-nats-"); err != nil {
			return nil, nil, nil, err
		}
	}
	pass := make([]byte, 16)
	rand.Read(pass)
	pub, sub := cluster.OperatorPermissions()
	operator := NATSUser{Name: "admin", Password: hex.EncodeToString(pass), Publish: pub, Subscribe: sub}
	if store != "" {
		users = append(users, operator)
	}
	if ids, err = NewIdentities(r.Dir, l.Gateways, perms); err == nil {
		for _, id := range ids {
			users = append(users, id.NATSUser)
		}
		js, err = StartNATSServers(bin, r.Dir, store, n, users)
	}
	if err != nil {
		os.RemoveAll(store)
		return nil, nil, nil, err
	}
	stop = func() {
		js.Stop()
		os.RemoveAll(store)
	}
	if store != "" {
		err = js.WaitJetStream(ctx, 30*time.Second)
	}
	for i := range js.Len() {
		r.Step("NATS server "+js.Name(i), js.CommandLine(i))
	}
	if store != "" && err == nil {
		err = provision(ctx, js.URL(), operator, l)
		r.Step("JetStream provisioned by the operator", fmt.Sprintf("bin/jsadmin provision -nats %s -nats-user %s -sets %d -gateways %d -replicas %d",
			js.URL(), operator.Name, l.Sets, l.Gateways, l.Replicas))
	}
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ids, js, stop, nil
}

// provision makes the JetStream at url hold l, as the operator.
func provision(ctx context.Context, url string, operator NATSUser, l jsjournal.Layout) error {
	nc, err := nats.Connect(url, nats.UserInfo(operator.Name, operator.Password), nats.Name("hongbao operator"))
	if err != nil {
		return fmt.Errorf("provisioning JetStream: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := jsjournal.Provision(ctx, js, l, false); err != nil {
		return fmt.Errorf("provisioning JetStream: %w", err)
	}
	return nil
}
