package server_test

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
)

// Slowloris: LOGINs trickled a byte at a time, silent connections, and
// logged-in connections holding half a frame; and what those cost the server.

// attackSlowloris runs three kinds of slow connections at once: LOGINs
// trickled a byte a second and connections that send nothing (both must get
// ERROR 7 at the login timeout, however busy they look), and logged-in
// connections holding half a frame. docs/PROTOCOL.md sets no deadline after
// LOGIN, so those are held as long as the peer likes: they must cost no
// goroutine (epoll ingress) and little memory, and the frame, completed
// later, must be answered.
func attackSlowloris(a *attacker) {
	t, sz := a.t, a.sz
	// Logged-in connections with half a 1 KiB PING (trailing bytes are
	// allowed), opened before anything else so that the server's cost for
	// them can be measured (slowlorisCost).
	frame := func(i int) []byte {
		return rawFrame(1024, byte(proto.Ping), uint64(i+1), bytes.Repeat([]byte{'z'}, 1024-proto.HeaderLen))
	}
	const half = 500
	a.sync("slowloris: before")
	conns := make([]*wire.Conn, sz.Slow)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	failed, err := swarm(sz.Slow, 16, func(i int) error {
		c, err := attackLogin(a.ts, slowUsers+uint32(i))
		if err != nil {
			return err
		}
		conns[i] = c
		return c.Send(frame(i)[:half])
	})
	if failed > 0 {
		t.Fatalf("slowloris: %d of %d logged-in connections failed: %v", failed, sz.Slow, err)
	}
	waitFor(t, "the slow connections logged in", func() bool {
		return a.ts.stats().Connections >= int64(sz.Users+sz.Slow)
	})
	waitFor(t, "the slow connections' half frames in the server's socket buffers", func() bool {
		for _, c := range conns {
			if out, _ := queued(t, c.Conn); out > 0 {
				return false
			}
		}
		return true
	})
	a.sync("slowloris: held")

	// Pre-login: LOGINs trickled a byte a second, and silent connections.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var late time.Duration
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	for i := range 2 * sz.Slow {
		wg.Add(1)
		if i%2 == 1 {
			time.Sleep(time.Millisecond) // opened over a second or so, not in one burst
		}
		go func() {
			defer wg.Done()
			start := time.Now() // before the connect: the server's clock starts at its accept, later
			c, err := attackDial(a.ts)
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			user := slowUsers + uint32(sz.Slow+i)
			login := proto.AppendLogin(nil, 1, user, tokenFor(user))
			trickle := i%2 == 0
			for k := 0; ; k++ {
				if trickle && k < len(login) {
					c.SetWriteDeadline(time.Now().Add(waitTime))
					c.Send(login[k : k+1]) // fails once the server closed it
				}
				f, err := c.Next(time.Second)
				if ne, ok := err.(net.Error); ok && ne.Timeout() && time.Since(start) < 2*hostileLoginTimeout+waitTime {
					continue
				}
				took := time.Since(start)
				switch {
				case err != nil:
					fail(fmt.Errorf("trickle %v: %w after %v; want ERROR 7", trickle, err, took))
				case f.Type != proto.Error || f.ErrorCode() != proto.ErrCodeLoginTimeout:
					fail(fmt.Errorf("trickle %v: got %s after %v; want ERROR 7", trickle, describe(f), took))
				case took < hostileLoginTimeout-50*time.Millisecond:
					fail(fmt.Errorf("trickle %v: ERROR 7 after %v, before the %v login timeout", trickle, took, hostileLoginTimeout))
				default:
					if err := expectEOF(c); err != nil {
						fail(fmt.Errorf("trickle %v: after ERROR 7: %w", trickle, err))
					}
					mu.Lock()
					late = max(late, took-hostileLoginTimeout)
					mu.Unlock()
				}
				return
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Errorf("slowloris before LOGIN: %v", joinErrs(errs))
	}
	t.Logf("slowloris: %d LOGINs trickled a byte a second and %d silent connections: ERROR 7 at most %v after the %v timeout",
		sz.Slow, sz.Slow, late.Round(time.Millisecond), hostileLoginTimeout)

	// The held frames, well past the login timeout, are completed a byte
	// at a time for their last bytes, and answered.
	failed, err = swarm(sz.Slow, 16, func(i int) error {
		c, f := conns[i], frame(i)
		c.SetWriteDeadline(time.Now().Add(waitTime))
		if err := c.Send(f[half : len(f)-2]); err != nil {
			return err
		}
		for k := len(f) - 2; k < len(f); k++ {
			time.Sleep(20 * time.Millisecond)
			if err := c.Send(f[k : k+1]); err != nil {
				return err
			}
		}
		for {
			r, err := c.Next(waitTime)
			if err != nil {
				return fmt.Errorf("waiting for PONG: %w", err)
			}
			if r.Type == proto.Envelope {
				continue
			}
			if r.Type != proto.Pong || r.Stamp != uint64(i+1) {
				return fmt.Errorf("got %s; want PONG stamp %d", describe(r), i+1)
			}
			return nil
		}
	})
	if failed > 0 {
		t.Errorf("slowloris: %d of %d held frames not answered once completed: %v", failed, sz.Slow, err)
	}
}

// slowlorisCost measures, in the server's process, what the logged-in slow
// connections holding half a frame cost: no goroutine on the epoll ingress,
// one descriptor each, and little heap (a partial frame borrows a pooled
// buffer for its bytes; netpoll's goroutines have a read buffer each).
func slowlorisCost(l *steadyLoad, sz hostileSizes) func(tag string) {
	t := l.t
	var before resources
	var heapBefore uint64
	return func(tag string) {
		runtime.GC()
		switch tag {
		case "slowloris: before":
			before, heapBefore = measure(t), heapInuse()
		case "slowloris: held":
			after, heapAfter := measure(t), heapInuse()
			g, fds := after.goroutines-before.goroutines, after.fds-before.fds
			perConn := (int64(heapAfter) - int64(heapBefore)) / int64(sz.Slow)
			t.Logf("slowloris: %d logged-in connections holding half a frame cost the server %+d goroutines, %+d fds, %+d B of heap each",
				sz.Slow, g, fds, perConn)
			if *ingressMode == "epoll" && g > leakSlack {
				t.Errorf("slowloris: %d connections holding half a frame cost %d goroutines; want none on the epoll ingress", sz.Slow, g)
			}
			if fds < sz.Slow || fds > sz.Slow+leakSlack {
				t.Errorf("slowloris: %d connections cost %d descriptors; want one each", sz.Slow, fds)
			}
			// netpoll's goroutine per connection keeps an 8 KiB read buffer.
			if bound := map[string]int64{"epoll": 4 << 10, "netpoll": 12 << 10}[*ingressMode]; perConn > bound {
				t.Errorf("slowloris: %d B of heap per connection holding half a frame; want at most %d KiB", perConn, bound>>10)
			}
		}
	}
}
