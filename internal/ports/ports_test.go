package ports

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestFreeAndWait: Free gives distinct ports one can listen on; WaitFree
// waits while one is held and returns once it is let go, and gives up at
// its timeout.
func TestFreeAndWait(t *testing.T) {
	ps, err := Free(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[0] == ps[1] || ps[1] == ps[2] || ps[0] == ps[2] {
		t.Fatalf("ports %v; want 3 distinct", ps)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ps[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitFree(50*time.Millisecond, ps...); err == nil {
		t.Fatal("WaitFree: nil while a port is held; want a timeout")
	}
	time.AfterFunc(50*time.Millisecond, func() { ln.Close() })
	if err := WaitFree(5*time.Second, ps...); err != nil {
		t.Fatalf("WaitFree once the port is let go: %v", err)
	}
}
