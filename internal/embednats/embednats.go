// Package embednats runs a NATS server inside the process, on loopback, for
// the cluster's tests and demos: nothing to install. In production the
// gateways connect to a real nats-server cluster (-nats). It knows nothing
// of hongbao: it starts a server on a port and stops it.
package embednats

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a running embedded NATS server.
type Server struct {
	*server.Server
	Port int
}

// Start runs a NATS server on 127.0.0.1:port (0: a free port), open to
// every client.
func Start(port int) (*Server, error) { return start(&server.Options{}, port) }

// User is a user of the embedded server: its password and the subjects it
// may publish and subscribe to.
type User struct {
	Name, Password     string
	Publish, Subscribe []string
}

// StartUsers runs a NATS server that lets in users only, each with its
// permissions, on 127.0.0.1:port (0: a free port).
func StartUsers(port int, users []User) (*Server, error) {
	return start(withUsers(&server.Options{}, users), port)
}

// StartUsersJetStream is StartUsers with JetStream, as StartJetStream runs
// it, storing its files under dir.
func StartUsersJetStream(dir string, port int, users []User) (*Server, error) {
	return start(withUsers(&server.Options{JetStream: true, StoreDir: dir, SyncAlways: true}, users), port)
}

// withUsers lets users alone into o, each with its permissions.
func withUsers(o *server.Options, users []User) *server.Options {
	for _, u := range users {
		o.Users = append(o.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: u.Publish}, Subscribe: &server.SubjectPermission{Allow: u.Subscribe}}})
	}
	return o
}

// StartConfig runs a NATS server with the accounts, users and permissions
// of the nats-server configuration file conf (deploy/nats), on
// 127.0.0.1:port (0: a free port) whatever the file listens on.
func StartConfig(conf string, port int) (*Server, error) {
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	return start(o, port)
}

// StartConfigAlone runs the nats-server configuration file conf as one
// server on its own: its accounts, users, permissions and JetStream
// settings, with its cluster block and routes dropped and its JetStream
// store under dir, on 127.0.0.1:port (0: a free port). A configuration of
// a NATS cluster (deploy/nats/nats-server-js.conf) is tested so.
func StartConfigAlone(conf, dir string, port int) (*Server, error) {
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	o.Cluster, o.Routes, o.RoutesStr = server.ClusterOpts{}, nil, ""
	if o.JetStream {
		o.StoreDir = dir
	}
	return start(o, port)
}

// StartJetStream runs a single NATS server with JetStream storing its files
// under dir, on 127.0.0.1:port (0: a free port). Every write is synced
// before it is acknowledged (sync_interval: always), as production must
// run it: with the default interval an acknowledged write can be lost to
// a power failure. A restart on the same dir and port finds its streams.
func StartJetStream(dir string, port int) (*Server, error) {
	return start(&server.Options{JetStream: true, StoreDir: dir, SyncAlways: true}, port)
}

func start(o *server.Options, port int) (*Server, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", port, true, true
	ns, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS: not ready within 10s")
	}
	return &Server{Server: ns, Port: ns.Addr().(*net.TCPAddr).Port}, nil
}

// URL is the address clients connect to.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// StartTest runs a NATS server on a free port until tb's cleanup; cleanups
// registered after it (the gateways') run before it stops.
func StartTest(tb testing.TB) *Server {
	tb.Helper()
	ns, err := Start(0)
	return startTest(tb, ns, err)
}

// StartTestJetStream is StartTest with JetStream, its files under dir
// (StartJetStream).
func StartTestJetStream(tb testing.TB, dir string) *Server {
	tb.Helper()
	ns, err := StartJetStream(dir, 0)
	return startTest(tb, ns, err)
}

// StartTestConfig is StartTest with the configuration file conf.
func StartTestConfig(tb testing.TB, conf string) *Server {
	tb.Helper()
	ns, err := StartConfig(conf, 0)
	return startTest(tb, ns, err)
}

// StartTestConfigAlone is StartTest with StartConfigAlone, its store
// under tb's temporary directory.
func StartTestConfigAlone(tb testing.TB, conf string) *Server {
	tb.Helper()
	ns, err := StartConfigAlone(conf, tb.TempDir(), 0)
	return startTest(tb, ns, err)
}

func startTest(tb testing.TB, ns *Server, err error) *Server {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Stop)
	return ns
}
