package ingress_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
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
