package ingress_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hongbao/conn"
	"hongbao/envelope"
	"hongbao/event"
	"hongbao/ingress"
	"hongbao/internal/proctcp"
	"hongbao/proto"
)

// fakeClock is an Options.Now whose value the test sets.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64 { return c.ns.Load() }

func TestEvents(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		clock := &fakeClock{}
		clock.ns.Store(time.Now().UnixNano())
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, Now: clock.now})

		const user = 7 // SET 1
		c, lg := login(t, ing, recs[1], user, 100)
		h := lg.ev.Conn
		if !h.Live() || lg.ev.RecvNs != clock.now() {
			t.Fatalf("KLogin conn live %v, RecvNs %d; want live, %d", h.Live(), lg.ev.RecvNs, clock.now())
		}

		gen0, err := envelope.NewGroupIDGen(0, time.Now().UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		env0 := gen0.Next() // owned by SET 0
		gen5, _ := envelope.NewGroupIDGen(5, time.Now().UnixNano())
		env5 := gen5.Next() // SET 5 does not run here
		shakeEnv := uint64(1)<<63 | 12345

		clock.ns.Add(1000)
		c.send(
			proto.AppendShake(nil, 1),
			proto.AppendOpen(nil, 2, env0),
			proto.AppendOpen(nil, 3, env5),
			proto.AppendOpen(nil, 4, shakeEnv),
			proto.AppendSend(nil, 5, 500, []uint32{8, 9, 10}),
			proto.AppendChat(nil, 6, 8, []byte("hi there")), // 8 lives in SET 0
			proto.AppendPing(nil, 7),
		)
		want := []struct {
			set   int
			kind  event.Kind
			stamp uint64
			check func(x rec) string
		}{
			{1, event.KShake, 1, nil},
			{0, event.KOpen, 2, func(x rec) string {
				if x.ev.Env != env0 {
					return "wrong Env"
				}
				return ""
			}},
			{1, event.KAnswer, 3, func(x rec) string {
				if !bytes.Equal(x.ev.Frame(), proto.AppendOpenResult(nil, 3, proto.OpenNoSuch, env5, 0)) {
					return "Out is not OPEN_RESULT 3"
				}
				return ""
			}},
			{1, event.KAnswer, 4, func(x rec) string {
				if !bytes.Equal(x.ev.Frame(), proto.AppendOpenResult(nil, 4, proto.OpenNoSuch, shakeEnv, 0)) {
					return "Out is not OPEN_RESULT 3"
				}
				return ""
			}},
			{1, event.KSend, 5, func(x rec) string {
				rcpt := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), 9), 10)
				if x.ev.Total != 500 || x.ev.N != 3 || !bytes.Equal(x.buf, rcpt) {
					return "wrong Total, N or Buf"
				}
				return ""
			}},
			{0, event.KChat, 6, func(x rec) string {
				if x.ev.Peer != 8 || !bytes.Equal(x.buf, proto.AppendChatDeliver(nil, 6, user, []byte("hi there"))) {
					return "wrong Peer or Buf"
				}
				return ""
			}},
			{1, event.KPing, 7, func(x rec) string {
				if !bytes.Equal(x.ev.Frame(), proto.AppendPong(nil, 7)) {
					return "Out is not PONG"
				}
				return ""
			}},
		}
		find := func(set int, stamp uint64) (rec, bool) {
			for _, x := range recs[set].events() {
				if x.ev.Stamp == stamp && x.ev.Kind != event.KLogin {
					return x, true
				}
			}
			return rec{}, false
		}
		for _, w := range want {
			waitFor(t, "the event of stamp "+w.kind.String(), func() bool { _, ok := find(w.set, w.stamp); return ok })
			x, _ := find(w.set, w.stamp)
			if x.ev.Kind != w.kind || x.ev.User != user || x.ev.Conn != h || x.ev.RecvNs != clock.now() {
				t.Errorf("stamp %d: got %v user %d conn %v RecvNs %d in SET %d; want %v user %d conn %v RecvNs %d",
					w.stamp, x.ev.Kind, x.ev.User, x.ev.Conn, x.ev.RecvNs, w.set, w.kind, user, h, clock.now())
			}
			if w.check != nil {
				if msg := w.check(x); msg != "" {
					t.Errorf("stamp %d (%v): %s: %+v, buf %x", w.stamp, w.kind, msg, x.ev, x.buf)
				}
			}
		}

		// Exactly once each: 7 requests and the KLogin.
		if n0, n1 := len(recs[0].events()), len(recs[1].events()); n0 != 2 || n1 != 6 {
			t.Errorf("got %d events in SET 0 and %d in SET 1; want 2 and 6", n0, n1)
		}
		wantFrames := ingress.RequestCounts{Login: 1, Shake: 1, Open: 3, Send: 1, Chat: 1, Ping: 1}
		waitStats(t, ing, fmt.Sprintf("Frames %+v", wantFrames), func(s ingress.Stats) bool { return s.Frames == wantFrames })

		// A second LOGIN is fatal: KFatal 1 with stamp 0, and what follows is ignored.
		c.send(loginFrame(8, user), proto.AppendPing(nil, 9))
		if x := recs[1].wait(t, event.KFatal); x.ev.Code != proto.ErrCodeMalformed || x.ev.Stamp != 0 || x.ev.Conn != h {
			t.Errorf("KFatal code %d stamp %d; want code 1 stamp 0", x.ev.Code, x.ev.Stamp)
		}
		c.send(proto.AppendPing(nil, 10))
		// The egress would now write ERROR and cut the connection off.
		h.C.Owner.Shutdown(h.C)
		recs[1].wait(t, event.KDisconnect)
		if _, ok := find(1, 9); ok {
			t.Error("a frame after KFatal was published")
		}
		if _, ok := find(1, 10); ok {
			t.Error("a frame after KFatal was published")
		}
		waitFor(t, "the release", func() bool { return ing.Conns() == 0 })
		if h.Live() {
			t.Error("handle still live after Release")
		}
	})
}

func TestMalformedAfterLogin(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		c, lg := login(t, ing, recs[1], 3, 1)
		c.send(proto.AppendPing(nil, 2), header(12, 0x42, 3), proto.AppendPing(nil, 4))
		x := recs[1].wait(t, event.KFatal)
		if x.ev.Code != proto.ErrCodeUnknownType || x.ev.Conn != lg.ev.Conn || x.ev.User != 3 {
			t.Errorf("KFatal code %d user %d; want %d user 3", x.ev.Code, x.ev.User, proto.ErrCodeUnknownType)
		}
		if n := recs[1].count(event.KPing); n != 1 {
			t.Errorf("%d KPing; want 1 (the one before the bad frame)", n)
		}
		c.nc.Close() // the peer leaving also ends it
		recs[1].wait(t, event.KDisconnect)
		waitFor(t, "the release", func() bool { return ing.Conns() == 0 })
	})
}

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

// TestDisconnect checks that the peer's close publishes KDisconnect and that
// the descriptor stays open until the egress calls Release.
func TestDisconnect(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		recs[0].keepDisconnected = make(chan conn.Handle, 1)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		c, lg := login(t, ing, recs[0], 2, 1)
		fd := lg.ev.Conn.C.FD
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		c.send(proto.AppendShake(nil, 2)[:5]) // a partial frame is dropped with the connection
		waitFor(t, "the partial frame read", func() bool { return ing.Stats().BytesIn >= uint64(len(loginFrame(1, 2))+5) })
		c.nc.Close()
		var h conn.Handle
		select {
		case h = <-recs[0].keepDisconnected:
		case <-time.After(waitTime):
			t.Fatal("no KDisconnect")
		}
		if x := recs[0].wait(t, event.KDisconnect); x.ev.User != 2 || x.ev.Conn != lg.ev.Conn {
			t.Errorf("KDisconnect user %d conn %v; want 2, %v", x.ev.User, x.ev.Conn, lg.ev.Conn)
		}
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino {
			t.Fatalf("fd %d closed before Release (%v)", fd, err)
		}
		if !h.Live() || ing.Conns() != 1 || h.C.In != nil {
			t.Fatalf("before Release: live %v, Conns %d, In %v; want live, 1, nil", h.Live(), ing.Conns(), h.C.In)
		}
		h.C.Owner.Release(h.C)
		if err := unix.Fstat(fd, &now); err == nil && now.Ino == st.Ino {
			t.Fatalf("fd %d still open after Release", fd)
		}
		if h.Live() || ing.Conns() != 0 {
			t.Fatalf("after Release: live %v, Conns %d; want stale, 0", h.Live(), ing.Conns())
		}
		waitFor(t, "Closed == 1", func() bool { return ing.Stats().Closed == 1 })
	})
}

// TestWritable fills a connection's socket, asks for writability and checks
// KWritable comes only once the peer has read.
func TestWritable(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		c, lg := login(t, ing, recs[1], 1, 1)
		cc := lg.ev.Conn.C
		chunk := make([]byte, 64<<10)
		written := 0
		for {
			n, err := unix.Write(cc.FD, chunk)
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			written += n
		}
		cc.Owner.WatchWritable(cc) // as the egress does after EAGAIN
		time.Sleep(50 * time.Millisecond)
		if n := recs[1].count(event.KWritable); n != 0 {
			t.Fatalf("%d KWritable while the socket is full; want 0", n)
		}
		c.nc.SetReadDeadline(time.Now().Add(waitTime))
		for got := 0; got < written; {
			n, err := c.nc.Read(chunk)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if x := recs[1].wait(t, event.KWritable); x.ev.Conn != lg.ev.Conn || x.ev.User != 1 {
			t.Errorf("KWritable conn %v user %d; want %v, 1", x.ev.Conn, x.ev.User, lg.ev.Conn)
		}
		// Once only, and reading goes on.
		c.send(proto.AppendPing(nil, 2))
		waitFor(t, "the PING", func() bool { return recs[1].count(event.KPing) == 1 })
		if n := recs[1].count(event.KWritable); n != 1 {
			t.Errorf("%d KWritable; want 1", n)
		}
	})
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
