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

// Start runs a NATS server on 127.0.0.1:port (0: a free port).
func Start(port int) (*Server, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
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
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Stop)
	return ns
}
