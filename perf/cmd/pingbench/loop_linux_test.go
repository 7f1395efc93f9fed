package main

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// pongServer answers every PING on fd with a PONG carrying its stamp, until
// fd closes: a stand-in for the server over a socketpair.
func pongServer(fd int) {
	buf := make([]byte, 4096)
	k := 0
	for {
		n, err := unix.Read(fd, buf[k:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		k += n
		whole := k / proto.PingLen * proto.PingLen
		out := buf[:whole]
		for i := 0; i < whole; i += proto.PingLen {
			out[i+2] = byte(proto.Pong) // same 12-byte layout, another type
		}
		if _, err := unix.Write(fd, out); err != nil {
			return
		}
		k = copy(buf, buf[whole:k])
	}
}

func TestLoopClosedPingPong(t *testing.T) {
	const conns, inflight = 4, 3
	var fds []int
	for range conns {
		sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(sp[0])
		defer unix.Close(sp[1])
		if err := unix.SetNonblock(sp[0], true); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, sp[0])
		go pongServer(sp[1])
	}
	l, err := newLoop(fds, inflight)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	now := time.Now()
	l.startNs = now.UnixNano()
	l.winStart = now.Add(20 * time.Millisecond).UnixNano()
	l.winEnd = now.Add(120 * time.Millisecond).UnixNano()
	l.drainEnd = now.Add(2 * time.Second).UnixNano()
	l.run()
	if l.err != nil {
		t.Fatalf("run: %v", l.err)
	}
	if l.sent != l.answered || l.sent < conns*inflight {
		t.Errorf("sent %d, answered %d; want equal and at least %d", l.sent, l.answered, conns*inflight)
	}
	if l.inWindow == 0 || l.hist.Count() != l.inWindow {
		t.Errorf("in the window: %d PONGs, %d latencies; want equal and > 0", l.inWindow, l.hist.Count())
	}
	for i, c := range l.conns {
		if c.out != 0 || c.k != 0 {
			t.Errorf("conn %d: %d outstanding, %d partial bytes at the end; want 0, 0", i, c.out, c.k)
		}
	}
}
