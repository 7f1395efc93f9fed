package server_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// -max-conns: connections beyond the limit closed at accept.

// TestMaxConns fills -max-conns with logged-in users, then floods the
// listener: every connection beyond the limit is closed at accept, at once
// (not left in the backlog), and counted in /metrics, while the users keep
// being served; a slot freed is taken by the next connection, which logs in.
func TestMaxConns(t *testing.T) {
	const limit = 20
	ts := startServer(t, func(o *server.Options) { o.MaxConns = limit })
	flood := 2000
	if raceEnabled || testing.Short() {
		flood = 400
	}
	users := make([]*client, limit)
	for i := range users {
		users[i] = login(t, ts, uint32(i+1))
	}
	accepted := metric(t, ts, "hongbao_accepted_total")

	// The flood, from 16 goroutines; the users PING through it.
	var slowest atomic.Int64
	var done atomic.Bool
	var failed int
	var err error
	go func() {
		defer done.Store(true)
		failed, err = swarm(flood, 16, func(i int) error {
			start := time.Now()
			c, err := attackDial(ts)
			if err != nil {
				return err // refused at accept: the handshake itself succeeded
			}
			defer c.Close()
			c.Send(proto.AppendLogin(nil, 1, uint32(limit+1+i), nil)) // may already fail: closed
			if err := expectEOF(c); err != nil {
				return fmt.Errorf("a connection beyond -max-conns: %w", err)
			}
			for d := int64(time.Since(start)); ; {
				if old := slowest.Load(); d <= old || slowest.CompareAndSwap(old, d) {
					break
				}
			}
			return nil
		})
	}()
	pings := 0
	for !done.Load() {
		users[pings%limit].ping()
		pings++
	}
	if failed > 0 {
		t.Fatalf("max-conns: %d of %d connections beyond the limit not closed at once: %v", failed, flood, err)
	}
	waitFor(t, "the refusals counted", func() bool { return metric(t, ts, "hongbao_refused_total") == uint64(flood) })
	if a := metric(t, ts, "hongbao_accepted_total"); a != accepted {
		t.Errorf("max-conns: hongbao_accepted_total went from %d to %d during the flood; want no connection let in", accepted, a)
	}
	t.Logf("max-conns: %d connections beyond %d closed at accept, the slowest seeing its close %v after its connect; %d PINGs answered meanwhile",
		flood, limit, time.Duration(slowest.Load()).Round(time.Millisecond), pings)
	if d := time.Duration(slowest.Load()); d > time.Second && !raceEnabled {
		t.Errorf("max-conns: a refused connection saw its close %v after its connect; want it closed at accept", d)
	}

	// A slot freed is the next connection's.
	users[0].c.Close()
	waitFor(t, "the freed slot", func() bool { return ts.Stats().Connections == limit-1 })
	c := login(t, ts, 1)
	c.ping()
	if st := ts.stats(); st.Connections != limit {
		t.Errorf("max-conns: %d connections; want %d", st.Connections, limit)
	}
	// And the limit holds again.
	extra := dial(t, ts)
	extra.expectClosed()
	waitFor(t, "the refusal counted", func() bool { return metric(t, ts, "hongbao_refused_total") == uint64(flood+1) })
}
