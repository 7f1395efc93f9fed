// Package proctcp reads the kernel's table of IPv4 TCP sockets, /proc/net/tcp, for tests that
// must see a socket from outside the code that holds it: whether the server's end of a
// connection has closed, which side of a stalled connection holds the unread bytes.
// It only reads that file: it opens no socket, and no production code imports it.
package proctcp

import (
	"os"
	"strconv"
	"strings"
)

// TCP states as /proc/net/tcp numbers them (include/net/tcp_states.h).
const (
	Established uint8 = 0x01
	Close       uint8 = 0x07
)

// Socket is one row of /proc/net/tcp.
type Socket struct {
	LocalPort, RemotePort int
	State                 uint8 // Established, Close, ...
	TxQueue               int64 // bytes sent and not yet acknowledged, or not yet sent
	RxQueue               int64 // bytes received and not yet read
}

// Sockets returns the IPv4 TCP sockets of this network namespace.
func Sockets() ([]Socket, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	return Parse(string(b)), nil
}

// Parse reads the rows of a /proc/net/tcp table; rows it cannot read are skipped.
func Parse(table string) []Socket {
	var out []Socket
	lines := strings.Split(table, "\n")
	for _, line := range lines[min(1, len(lines)):] { // the first line is the header
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		local, ok1 := port(f[1])
		remote, ok2 := port(f[2])
		st, err := strconv.ParseUint(f[3], 16, 8)
		tx, rx, ok3 := strings.Cut(f[4], ":")
		txq, err1 := strconv.ParseInt(tx, 16, 64)
		rxq, err2 := strconv.ParseInt(rx, 16, 64)
		if !ok1 || !ok2 || !ok3 || err != nil || err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Socket{LocalPort: local, RemotePort: remote, State: uint8(st), TxQueue: txq, RxQueue: rxq})
	}
	return out
}

// port reads the port of an address written ADDR:PORT in hex.
func port(addr string) (int, bool) {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(p, 16, 16)
	return int(n), err == nil
}
