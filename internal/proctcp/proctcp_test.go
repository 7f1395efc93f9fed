package proctcp_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/hongbao-io/hongbao/internal/proctcp"
)

// TestParse reads a table as the kernel writes it.
func TestParse(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:2328 0100007F:D431 01 00000010:00000200 00:00000000 00000000  1000        0 12346 1 0000000000000000 20 4 30 10 -1
   2: garbage
`
	got := proctcp.Parse(table)
	want := []proctcp.Socket{
		{LocalPort: 9000, RemotePort: 0, State: 0x0A},
		{LocalPort: 9000, RemotePort: 0xD431, State: proctcp.Established, TxQueue: 16, RxQueue: 512},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse: %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v; want %+v", i, got[i], want[i])
		}
	}
}

// TestSockets finds a loopback connection of this process in the live table.
func TestSockets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/net/tcp is Linux's")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := ln.Addr().(*net.TCPAddr).Port
	cli := c.LocalAddr().(*net.TCPAddr).Port
	socks, err := proctcp.Sockets()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if s.LocalPort == cli && s.RemotePort == srv {
			if s.State != proctcp.Established {
				t.Errorf("client socket in state %#x; want established", s.State)
			}
			return
		}
	}
	t.Errorf("no socket from port %d to port %d among %d", cli, srv, len(socks))
}
