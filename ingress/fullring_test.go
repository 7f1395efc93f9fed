package ingress_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/internal/proctcp"
	"github.com/hongbao-io/hongbao/proto"
)

// TestOverload fills a ring of 8 (headroom 4) behind a blocked stage: the
// first requests go in, the next ones are answered "overloaded", all of one
// read's refusals in one event, then answers fill the headroom and the
// connection stalls, and once the stage moves the stalled frames go in.
// Nothing is lost or duplicated, and order holds but for the refusals, which
// come where the first of them was.
func TestOverload(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 8, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		const user = 3                          // SET 1
		c, _ := login(t, ing, recs[1], user, 1) // seq 0, handled
		rc := recs[1]
		rc.hold.Store(true)
		c.send(proto.AppendPing(nil, 2)) // seq 1: the stage blocks on it
		<-rc.blocked

		gen1, _ := envelope.NewGroupIDGen(1, time.Now().UnixNano())
		env := gen1.Next()
		c.send(
			proto.AppendShake(nil, 3), proto.AppendShake(nil, 4), proto.AppendShake(nil, 5), // seqs 2–4: requests
			proto.AppendShake(nil, 6), // a request would leave < 4 free: overloaded, in the batch at seq 5
			proto.AppendOpen(nil, 7, env),
			proto.AppendSend(nil, 8, 10, []uint32{4}),
			proto.AppendChat(nil, 9, 5, []byte("x")),
			proto.AppendPing(nil, 10),  // seq 6, which closes the batch
			proto.AppendShake(nil, 11), // overloaded, in a new batch at seq 7
			proto.AppendPing(nil, 12),  // seq 8: the ring is full
			proto.AppendPing(nil, 13),  // stalls
			proto.AppendPing(nil, 14),
			proto.AppendShake(nil, 15),
		)
		waitFor(t, "the stall", func() bool { return ing.Stats().Stalls == 1 })
		s := ing.Stats()
		for typ, n := range map[proto.Type]uint64{proto.Shake: 2, proto.Open: 1, proto.Send: 1, proto.Chat: 1} {
			if s.Overload.Of(typ) != n {
				t.Errorf("Overload.Of(%v) = %d; want %d", typ, s.Overload.Of(typ), n)
			}
		}
		rc.hold.Store(false)
		close(rc.gate)
		waitFor(t, "every event", func() bool { return len(rc.events()) == 12 })

		type want struct {
			kind  event.Kind
			stamp uint64
			out   []byte
		}
		var refused []byte
		refused = proto.AppendShakeResult(refused, 6, proto.ShakeOverloaded, 0, 0)
		refused = proto.AppendOpenResult(refused, 7, proto.OpenOverloaded, env, 0)
		refused = proto.AppendSendAck(refused, 8, proto.SendOverloaded, 0)
		refused = proto.AppendChatAck(refused, 9, proto.ChatOverloaded, 5)
		wants := []want{
			{event.KLogin, 1, nil}, {event.KPing, 2, proto.AppendPong(nil, 2)},
			{event.KShake, 3, nil}, {event.KShake, 4, nil}, {event.KShake, 5, nil},
			{event.KAnswer, 6, refused},
			{event.KPing, 10, proto.AppendPong(nil, 10)},
			{event.KAnswer, 11, proto.AppendShakeResult(nil, 11, proto.ShakeOverloaded, 0, 0)},
			{event.KPing, 12, proto.AppendPong(nil, 12)}, {event.KPing, 13, proto.AppendPong(nil, 13)},
			{event.KPing, 14, proto.AppendPong(nil, 14)},
			{event.KShake, 15, nil},
		}
		got := rc.events()
		if x := got[11]; x.ev.Kind == event.KAnswer {
			// The retry may come before the stage has freed the headroom: then
			// the SHAKE behind the stalled PING is refused too.
			wants[11] = want{event.KAnswer, 15, proto.AppendShakeResult(nil, 15, proto.ShakeOverloaded, 0, 0)}
		}
		for i, w := range wants {
			x := got[i]
			out := x.ev.Frame()
			if x.ev.Buf != nil {
				out = x.buf
			}
			if x.ev.Kind != w.kind || x.ev.Stamp != w.stamp || (w.out != nil && !bytes.Equal(out, w.out)) {
				t.Errorf("event %d: got %v stamp %d out %x; want %v stamp %d out %x", i, x.ev.Kind, x.ev.Stamp, out, w.kind, w.stamp, w.out)
			}
		}
		if len(recs[0].events()) != 0 {
			t.Errorf("SET 0 got %d events; want none", len(recs[0].events()))
		}
		// The connection reads again after its stall.
		c.send(proto.AppendPing(nil, 16))
		waitFor(t, "the PING after the stall", func() bool { return rc.count(event.KPing) == 6 })
	})
}

// TestResetWhileStalled: a client that sent more than a stalled connection
// has read, then reset the connection, still has every frame it sent
// handled, in order, before its KDisconnect: a reset makes epoll report HUP
// and ERR, which cannot be masked while the input is paused, but the bytes
// that arrived before it stay readable.
func TestResetWhileStalled(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 8, 4)
		// A small read budget leaves most of what was sent in the socket.
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, ReadBudget: 2 * len(proto.AppendPing(nil, 0))})
		const user, pings = 3, 40 // SET 1
		c, _ := login(t, ing, recs[1], user, 1)
		rc := recs[1]
		rc.hold.Store(true)
		c.send(proto.AppendPing(nil, 2)) // the stage blocks on it
		<-rc.blocked
		var frames [][]byte
		for i := range uint64(pings) {
			frames = append(frames, proto.AppendPing(nil, 3+i))
		}
		c.send(frames...)
		waitFor(t, "the stall", func() bool { return ing.Stats().Stalls >= 1 })
		tc := c.nc.(*net.TCPConn)
		port := tc.LocalAddr().(*net.TCPAddr).Port
		tc.SetLinger(0) // Close resets
		tc.Close()
		srvPort := ing.Addrs()[0].(*net.TCPAddr).Port
		waitFor(t, "the server's socket reset", func() bool { return serverSocketClosed(t, srvPort, port) })
		time.Sleep(20 * time.Millisecond) // for the loop to see HUP while stalled
		close(rc.gate)
		rc.hold.Store(false)
		rc.wait(t, event.KDisconnect)

		var stamps []uint64
		for _, x := range rc.events() {
			if x.ev.Kind == event.KPing {
				stamps = append(stamps, x.ev.Stamp)
			}
		}
		for i, s := range stamps {
			if s != uint64(2+i) {
				t.Fatalf("PING %d has stamp %d; want %d (stamps seen: %v)", i, s, 2+i, stamps)
			}
		}
		if len(stamps) != 1+pings {
			t.Errorf("%d PINGs reached the SET; want %d (stamps seen: %v)", len(stamps), 1+pings, stamps)
		}
	})
}

// serverSocketClosed reports whether the server's end (port srv) of the
// loopback connection from client port cli has closed (TCP_CLOSE, as after a
// reset), from /proc/net/tcp.
func serverSocketClosed(t testing.TB, srv, cli int) bool {
	socks, err := proctcp.Sockets()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range socks {
		if s.LocalPort == srv && s.RemotePort == cli {
			return s.State == proctcp.Close
		}
	}
	return true // gone altogether
}

// TestLoginStall fills a SET's ring completely: a LOGIN for that SET stalls
// until the ring has room, and CloseIdle still closes a stalled connection.
func TestLoginStall(t *testing.T) {
	fill := func(t *testing.T, mode string) (*ingress.Ingress, *recorder) {
		bus, recs := newBus(t, 2, 8, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		rc := recs[1]
		a, _ := login(t, ing, rc, 1, 1)
		rc.hold.Store(true)
		a.send(proto.AppendPing(nil, 2)) // seq 1: the stage blocks on it
		<-rc.blocked
		var pings []byte
		for i := range uint64(7) { // seqs 2–8: the ring is full
			pings = proto.AppendPing(pings, 3+i)
		}
		a.send(pings)
		waitStats(t, ing, "8 PINGs", func(s ingress.Stats) bool { return s.Frames.Ping == 8 })
		return ing, rc
	}
	modes(t, func(t *testing.T, mode string) {
		t.Run("retried", func(t *testing.T) {
			ing, rc := fill(t, mode)
			b := dial(t, ing)
			b.send(loginFrame(20, 3))
			waitStats(t, ing, "the stall", func(s ingress.Stats) bool { return s.Stalls == 1 })
			rc.hold.Store(false)
			close(rc.gate)
			b.expect(proto.LoginAck, 20)
			if x := rc.wait(t, event.KLogin); x.ev.User != 1 {
				t.Errorf("first KLogin for user %d; want 1", x.ev.User)
			}
			waitFor(t, "B's KLogin", func() bool { return rc.count(event.KLogin) == 2 })
		})
		t.Run("CloseIdle", func(t *testing.T) {
			ing, _ := fill(t, mode)
			b := dial(t, ing)
			b.send(loginFrame(20, 3))
			waitStats(t, ing, "the stall", func(s ingress.Stats) bool { return s.Stalls == 1 })
			ing.CloseIdle(proto.ErrCodeShuttingDown)
			b.expectError(proto.ErrCodeShuttingDown, 0)
			if n := ing.Conns(); n != 1 {
				t.Errorf("Conns() = %d after CloseIdle; want 1", n)
			}
		})
	})
}
