package server_test

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/internal/proctcp"
	"github.com/hongbao-io/hongbao/proto"
)

// Helpers of the hostile, overload and -max-conns tests: connections that
// must end a certain way, a swarm of them, and what the server's process and
// the kernel say.

// expectErrorClose reads until ERROR code, skipping frames skip allows, then
// requires the close.
func expectErrorClose(c *wire.Conn, code uint8, skip func(proto.Frame) bool) error {
	for {
		f, err := c.Next(waitTime)
		if err != nil {
			return fmt.Errorf("waiting for ERROR %d: %w", code, err)
		}
		if skip != nil && skip(f) {
			continue
		}
		if f.Type != proto.Error || f.ErrorCode() != code {
			return fmt.Errorf("got %s; want ERROR %d", describe(f), code)
		}
		return expectEOF(c)
	}
}

// expectEOF requires the server to close c with no further frame.
func expectEOF(c *wire.Conn) error {
	f, err := c.Next(waitTime)
	switch {
	case err == nil:
		return fmt.Errorf("got %s; want the close", describe(f))
	case !isClosed(err):
		return fmt.Errorf("%w; want EOF or a reset", err)
	}
	return nil
}

// reset closes c with a TCP reset: SO_LINGER 0, then close.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// swarm runs fn(i) for i in [0, n) on at most workers goroutines and
// returns how many failed and the first few errors.
func swarm(n, workers int, fn func(i int) error) (failed int, err error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if e := fn(i); e != nil {
					mu.Lock()
					failed++
					if len(errs) < 3 {
						errs = append(errs, fmt.Errorf("#%d: %w", i, e))
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return failed, errors.Join(errs...)
}

// drainAll reads c to its end and returns its frames and how it ended.
func drainAll(c *wire.Conn) ([]proto.Frame, error) {
	var fs []proto.Frame
	for {
		f, err := c.Next(waitTime)
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}

// joinErrs joins the texts of errs with semicolons, for one failure line.
func joinErrs(errs []error) string {
	var b []string
	for _, e := range errs {
		b = append(b, e.Error())
	}
	return strings.Join(b, "; ")
}

// heapInuse is this process's heap in use.
func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// metric reads one sample of /metrics (sampleOf, pipeline_test.go, parses).
func metric(t *testing.T, ts *testServer, name string) uint64 {
	t.Helper()
	code, body := ts.do("GET", "/metrics", ts.token)
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	return sampleOf(t, string(body), name)
}

// socketQueues describes the loopback TCP sockets with port at either end
// from /proc/net/tcp: which side holds unread or unsent bytes, for a
// failure message.
func socketQueues(port int) string {
	socks, err := proctcp.Sockets()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, s := range socks {
		if s.LocalPort != port && s.RemotePort != port {
			continue
		}
		side := "client"
		if s.LocalPort != port {
			side = "server"
		}
		out = append(out, fmt.Sprintf("%s: %d bytes unsent or unacked, %d unread (state %02X)", side, s.TxQueue, s.RxQueue, s.State))
	}
	return strings.Join(out, "; ")
}
