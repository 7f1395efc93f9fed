package ingress

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStampReader: a read with the receive timestamp returns the bytes and
// when the kernel took the newest of them: after they were sent, before the
// read, and at least the pause between the two before the read; of several
// writes, the last one's.
func TestStampReader(t *testing.T) {
	cli, fd := stampedPair(t)
	var r stampReader
	buf := make([]byte, 64)
	const pause = 20 * time.Millisecond
	for i := range 3 {
		sent := time.Now().UnixNano()
		if _, err := cli.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		n, ts, err := r.read(fd, buf)
		read := time.Now().UnixNano()
		if err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("read %d: %q, %v", i, buf[:n], err)
		}
		if ts < sent || ts > read || read-ts < int64(pause) {
			t.Fatalf("read %d: timestamp %d; want in [%d, %d] and %v before the read", i, ts, sent, read, pause)
		}
		t.Logf("read %d: the bytes waited %v in the socket", i, time.Duration(read-ts))
	}

	// Two writes in one read: the timestamp is the newer one's.
	cli.Write([]byte("old"))
	time.Sleep(pause)
	second := time.Now().UnixNano()
	cli.Write([]byte("new"))
	time.Sleep(pause)
	n, ts, err := r.read(fd, buf)
	if err != nil || string(buf[:n]) != "oldnew" || ts < second {
		t.Fatalf("two writes: %q, %v, timestamp %d; want oldnew and the second write's time (≥ %d)", buf[:n], err, ts, second)
	}

	// Without SO_TIMESTAMPNS: the bytes, and no timestamp.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 0)
	cli.Write([]byte("hi"))
	n, ts, err = r.read(fd, buf)
	if err != nil || ts != 0 || n == 0 {
		t.Fatalf("without timestamps: n %d ts %d err %v; want bytes and ts 0", n, ts, err)
	}
}

// TestStampReaderAllocs: a timestamped read allocates nothing.
func TestStampReaderAllocs(t *testing.T) {
	cli, fd := stampedPair(t)
	var r stampReader
	buf, x := make([]byte, 64), []byte("x")
	allocs := testing.AllocsPerRun(100, func() {
		cli.Write(x)
		if _, ts, err := r.read(fd, buf); err != nil || ts == 0 {
			t.Fatalf("ts %d, %v", ts, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per timestamped read; want 0", allocs)
	}
}

// stampedPair returns the client end of a loopback TCP connection and a
// blocking descriptor of the server end with SO_TIMESTAMPNS set.
func stampedPair(t testing.TB) (net.Conn, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	f, err := srv.(*net.TCPConn).File() // a blocking duplicate of the descriptor
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fd := int(f.Fd())
	stampConn(fd)
	// The kernel turns timestamping on for the whole system after the first
	// socket asks, from a work queue: the first packets may come without.
	var r stampReader
	buf := make([]byte, 1)
	for start := time.Now(); ; {
		cli.Write([]byte("w"))
		if _, ts, err := r.read(fd, buf); err != nil || ts != 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("no receive timestamp")
		}
		time.Sleep(time.Millisecond)
	}
	return cli, fd
}

// TestGateStamps: reads are timestamped while the shedder is busy, after an
// epoll_wait that filled its events, and after a cycle over half the target;
// else not. Without shedding, never.
func TestGateStamps(t *testing.T) {
	const events = 4
	d := newDelayShed(100)
	for i, step := range []struct {
		now   int64
		n     int
		busy  bool
		stamp bool
	}{
		{1000, 1, false, true},  // the first round: no cycle known
		{1040, 1, false, false}, // 40 ≤ 50
		{1090, 4, false, false}, // 50 ≤ 50; it filled its events...
		{1100, 1, false, true},  // ...so the next round is timestamped
		{1200, 0, false, true},  // 100 > 50
		{1201, 0, true, true},   // busy
		{1202, 0, false, false},
	} {
		if step.busy {
			d.since = 1
		} else {
			d.since = 0
		}
		if got := d.stamps(step.now, step.n == events); got != step.stamp {
			t.Errorf("step %d: stamp %v; want %v", i, got, step.stamp)
		}
		if (noShed{}).stamps(step.now, step.n == events) {
			t.Errorf("step %d: stamped without shedding", i)
		}
	}
}

// BenchmarkRead compares a plain read with a timestamped one and the clock
// read after it: each reads one 12-byte frame of a queue of them that the
// client wrote beforehand.
func BenchmarkRead(b *testing.B) {
	for _, stamped := range []bool{false, true} {
		name := "read"
		if stamped {
			name = "recvmsg+timestamp"
		}
		b.Run(name, func(b *testing.B) {
			cli, fd := stampedPair(b)
			var r stampReader
			frame, buf := make([]byte, 12), make([]byte, 12)
			const queue = 256
			var waited int64
			b.ReportAllocs()
			for i := 0; i < b.N; i += queue {
				b.StopTimer()
				for range queue {
					cli.Write(frame)
				}
				b.StartTimer()
				for range queue {
					var err error
					if stamped { // as fill does: the read, then the clock
						var ts int64
						_, ts, err = r.read(fd, buf)
						waited += time.Now().UnixNano() - ts
					} else {
						_, err = unix.Read(fd, buf)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			if stamped && waited <= 0 {
				b.Fatal("no wait measured")
			}
		})
	}
}
