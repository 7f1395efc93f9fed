package ingress_test

import (
	"net"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// rawClients opens n connections with bare syscalls and logs each in, so the
// client side puts nothing on the Go heap per connection (only fds, a slice
// of them allocated beforehand). It returns the descriptors.
func rawClients(t *testing.T, addr *net.TCPAddr, fds []int) {
	t.Helper()
	sa := &unix.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], addr.IP.To4())
	req := make([]byte, 0, 64)
	for i := range fds {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		fds[i] = fd
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatalf("client %d: connect: %v", i, err)
		}
		req = proto.AppendLogin(req[:0], 1, uint32(i+1), nil)
		if _, err := unix.Write(fd, req); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	var ack [proto.LoginAckLen]byte
	for i, fd := range fds { // blocking reads: every LOGIN_ACK, in turn
		for got := 0; got < len(ack); {
			n, err := unix.Read(fd, ack[got:])
			if n <= 0 {
				t.Fatalf("client %d: LOGIN_ACK: %d bytes, %v", i, n, err)
			}
			got += n
		}
	}
}

// heapAndStacks is the Go memory a test process holds after a full GC: live
// heap plus goroutine stacks.
func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle empties sync.Pool's victim cache
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestMemoryPerConn measures what an idle logged-in connection costs the
// server in Go heap and stacks. The client side uses raw syscalls into a
// slice allocated before the first measurement, so it adds nothing.
func TestMemoryPerConn(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 5,000 connections")
	}
	const n = 5000
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 2*n+200 {
		t.Skipf("needs %d descriptors; the limit is %d", 2*n+200, lim.Cur)
	}
	modes(t, func(t *testing.T, mode string) {
		ing := serve(t, ingress.Options{Mode: mode, Bare: true})
		fds := make([]int, n)
		defer func() {
			for _, fd := range fds {
				if fd > 0 {
					unix.Close(fd)
				}
			}
		}()
		before := heapAndStacks()
		rawClients(t, ing.Addrs()[0].(*net.TCPAddr), fds)
		waitFor(t, "every login", func() bool { return ing.Stats().Logins == n })
		after := heapAndStacks()
		per := (int64(after) - int64(before)) / n
		t.Logf("%s: %d bytes of Go heap and stacks per idle logged-in connection (%d connections; client side: none)", mode, per, n)
		if mode != ingress.ModeNetpoll && per > 1024 {
			t.Errorf("%d bytes per connection; want ≤ 1024 (target 512)", per)
		}
	})
}
