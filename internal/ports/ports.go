// Package ports finds loopback TCP ports for the servers that tests and
// perf tools start at fixed ports, so that a restart listens where it did.
package ports

import (
	"fmt"
	"net"
	"time"
)

// Free returns n distinct loopback ports free at the time of the call: all
// are held open together so that none comes back twice.
func Free(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// WaitFree waits until every port can be listened on at 127.0.0.1 (a
// server killed a moment ago may still hold one), or timeout.
func WaitFree(timeout time.Duration, ports ...int) error {
	deadline := time.Now().Add(timeout)
	for _, p := range ports {
		for {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err == nil {
				ln.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("port %d not free within %v: %w", p, timeout, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
