package server_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// blackhole is a TCP proxy to a NATS server that, once holed, forwards
// nothing either way and accepts new connections that go nowhere: a silent
// network, sockets open.
type blackhole struct {
	ln    net.Listener
	holed atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func newBlackhole(t *testing.T, upstream string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			if b.holed.Load() {
				continue // accepted, and never answered
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, u)
			b.mu.Unlock()
			go b.pipe(u, c)
			go b.pipe(c, u)
		}
	}()
	return b
}

func (b *blackhole) url() string { return "nats://" + b.ln.Addr().String() }

// pipe copies src to dst, swallowing everything while holed.
func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !b.holed.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			return
		}
	}
}

// TestCorePartitionTakesNothing: a gateway whose crossings' connection
// alone goes silent (sockets open, nothing flowing; its journal's
// connection fine) hears nobody, itself included, while its SETs are idle:
// it claims no SET of the others, which go on serving theirs and take its
// SETs over once its lease lapses; it then stops (LostError), having told
// no money meanwhile.
func TestCorePartitionTakesNothing(t *testing.T) {
	t.Parallel() // it waits on leases, not on the CPU
	const sets = 6
	ns := embednats.StartTestJetStream(t, t.TempDir())
	bh := newBlackhole(t, ns.Addr().String())
	var gws []*testServer
	for node := range 3 {
		gws = append(gws, startReplicated(t, ns, node, 3, sets, func(o *server.Options) {
			o.Rebalance = 100 * time.Millisecond // the first claims every SET: evened out by moves
			if node == 2 {
				server.SetCoreNATS(o, bh.url())
			}
		}))
	}
	settled(t, gws, 2)
	takeovers := metric(t, gws[2], "hongbao_cluster_takeovers_total")
	bh.holed.Store(true)
	waitFor(t, "gateways 0 and 1 to run every SET", func() bool {
		return metric(t, gws[0], "hongbao_cluster_sets_running")+metric(t, gws[1], "hongbao_cluster_sets_running") == sets
	})
	select {
	case <-gws[2].Lost():
	case <-time.After(waitTime):
		t.Fatal("gateway 2 did not stop once its SETs were taken")
	}
	if n := metric(t, gws[2], "hongbao_cluster_takeovers_total"); n != takeovers {
		t.Errorf("the partitioned gateway took %d SETs over; want none", n-takeovers)
	}
	for i, g := range gws[:2] {
		select {
		case <-g.Lost():
			t.Fatalf("healthy gateway %d lost a SET to the partitioned one", i)
		default:
		}
		if metric(t, g, "hongbao_cluster_fenced") != 0 || metric(t, g, "hongbao_cluster_fences_total") != 0 {
			t.Errorf("healthy gateway %d fenced itself", i)
		}
	}
	if err := gws[2].shutdown(); !errors.As(err, new(*server.LostError)) {
		t.Fatalf("Shutdown of gateway 2: %v; want a LostError", err)
	}
}

// TestNATSDownKeepsIdleConnections: NATS goes away under a gateway, no
// other one can serve through it. The gateway fences itself: /healthz 503,
// a request answered ERROR 9, a login LOGIN_ACK 3 — while an idle
// connection stays, and the gateway neither stops at its rounds' bound nor
// claims anything. NATS back, with its SETs still its own, it serves the
// idle connection's next SHAKE with money, and every fen told is counted.
// Stopped while cut off again, it stops within its shutdown's time.
func TestNATSDownKeepsIdleConnections(t *testing.T) {
	t.Parallel() // it waits on leases, not on the CPU
	const sets = 2
	dir := t.TempDir()
	ns := embednats.StartTestJetStream(t, dir)
	port := ns.Port
	a := startReplicated(t, ns, 0, 1, sets, func(o *server.Options) { o.JetStreamAckWait = time.Second })
	waitFor(t, "gateway 0 to run every SET", func() bool { return metric(t, a, "hongbao_cluster_sets_running") == sets })
	c := a.startCampaign("shake", "rate=100000&total=5000&min=1&max=100")
	a.waitCampaign(c.ID)
	idle, busy := login(t, a, 1), login(t, a, 2)
	shake := func(u *client) (uint8, uint32) {
		t.Helper()
		s := u.nextStamp()
		u.send(proto.AppendShake(nil, s))
		st, _, amount := u.answer(s).ShakeResult()
		return st, amount
	}
	var told uint64
	for range 20 {
		for _, u := range []*client{idle, busy} {
			if st, amount := shake(u); st == proto.ShakeGot {
				told += uint64(amount)
			}
		}
	}
	ns.Stop()
	waitFor(t, "the gateway to fence itself", func() bool { return metric(t, a, "hongbao_cluster_fenced") == 1 })
	if code, _ := a.do("GET", "/healthz", ""); code != 503 {
		t.Errorf("/healthz while NATS is down: %d; want 503", code)
	}
	s := busy.nextStamp()
	busy.send(proto.AppendShake(nil, s))
	busy.expectError(proto.ErrCodeMoved)
	l := dial(t, a)
	if st := l.loginStatus(3, nil); st != proto.LoginWrongGateway {
		t.Errorf("LOGIN while fenced: status %d; want 3", st)
	}
	time.Sleep(2 * time.Second) // past the rounds' bound (1 s): no stop
	select {
	case <-a.Lost():
		t.Fatal("the gateway stopped while NATS was down, though no other could take its SETs")
	default:
	}

	ns2, err := embednats.StartJetStream(dir, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	waitFor(t, "the gateway to serve again", func() bool { return metric(t, a, "hongbao_cluster_fenced") == 0 })
	idle.ping()
	got := false
	for range 10 {
		if st, amount := shake(idle); st == proto.ShakeGot {
			told += uint64(amount)
			got = true
		}
	}
	if !got {
		t.Error("the idle connection got no money once NATS was back")
	}
	st := a.stats()
	if st.Shake.GotAmount < told {
		t.Errorf("counted %d fen got; told %d", st.Shake.GotAmount, told)
	}
	checkShakeLedger(t, st)

	// Cut off again, stopped: within its shutdown's time, not after NATS.
	ns2.Stop()
	waitFor(t, "the gateway to fence itself again", func() bool { return metric(t, a, "hongbao_cluster_fenced") == 1 })
	start := time.Now()
	a.shutdown()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a stop while cut off from NATS took %v", took.Round(time.Millisecond))
	}
}

// TestJetStreamStallRefusesMoney: JetStream stops answering a gateway
// whose crossings' connection is fine (its journal's connection silent, as
// to a stream without a quorum): past the lease its money requests are
// answered "overloaded" at the door and its /healthz is 503, while other
// requests are served and no connection is dropped; the round in flight is
// not given up (the gateway does not stop, past its bound too), and with
// JetStream back it is acknowledged and money is answered again, every fen
// told counted.
func TestJetStreamStallRefusesMoney(t *testing.T) {
	t.Parallel() // it waits on leases, not on the CPU
	const sets = 2
	ns := embednats.StartTestJetStream(t, t.TempDir())
	bh := newBlackhole(t, ns.Addr().String())
	a := startReplicated(t, ns, 0, 1, sets, func(o *server.Options) {
		o.JetStreamAckWait = time.Second
		o.NATS = bh.url() // the journal's connection; the crossings' goes straight
		server.SetCoreNATS(o, ns.URL())
	})
	waitFor(t, "gateway 0 to run every SET", func() bool { return metric(t, a, "hongbao_cluster_sets_running") == sets })
	c := a.startCampaign("shake", "rate=100000&total=5000&min=1&max=100")
	a.waitCampaign(c.ID)
	u := login(t, a, 1)
	var told uint64
	shake := func() uint8 {
		t.Helper()
		s := u.nextStamp()
		u.send(proto.AppendShake(nil, s))
		st, _, amount := u.answer(s).ShakeResult()
		if st == proto.ShakeGot {
			told += uint64(amount)
		}
		return st
	}
	shake()
	bh.holed.Store(true)
	s := u.nextStamp()
	u.send(proto.AppendShake(nil, s)) // its round waits for JetStream
	waitFor(t, "the gateway to refuse money at the door", func() bool { return metric(t, a, "hongbao_cluster_stalled") == 1 })
	if code, _ := a.do("GET", "/healthz", ""); code != 503 {
		t.Errorf("/healthz while JetStream stalls: %d; want 503", code)
	}
	if st := shake(); st != proto.ShakeOverloaded {
		t.Errorf("a SHAKE while JetStream stalls: status %d; want 2 (overloaded)", st)
	}
	u.ping()
	time.Sleep(2 * time.Second) // past the round's bound (1 s): no stop
	select {
	case <-a.Lost():
		t.Fatal("the gateway stopped for a JetStream stall")
	default:
	}
	if n := metric(t, a, "hongbao_cluster_fences_total"); n != 0 {
		t.Error("the gateway fenced itself, hearing itself on its crossings' connection")
	}
	bh.holed.Store(false)
	if st, _, amount := u.answer(s).ShakeResult(); st == proto.ShakeGot {
		told += uint64(amount)
	}
	waitFor(t, "money served again", func() bool { return metric(t, a, "hongbao_cluster_stalled") == 0 })
	for range 5 {
		shake()
	}
	st := a.stats()
	if st.Shake.GotAmount < told {
		t.Errorf("counted %d fen got; told %d", st.Shake.GotAmount, told)
	}
	checkShakeLedger(t, st)
}
