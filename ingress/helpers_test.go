package ingress_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// waitTime bounds every wait of these tests.
const waitTime = 10 * time.Second

// modeEpollNetpoller is ModeEpoll with Options.NetpollWait, a mode of these
// tests only: withMode turns it into the Options.
const modeEpollNetpoller = "epoll-netpoller"

// modes runs f for every mode this system has, and for the epoll loops both
// ways of blocking.
func modes(t *testing.T, f func(t *testing.T, mode string)) {
	for _, m := range []string{ingress.ModeEpoll, modeEpollNetpoller, ingress.ModeNetpoll} {
		if m != ingress.ModeNetpoll && runtime.GOOS != "linux" {
			continue
		}
		t.Run(m, func(t *testing.T) { f(t, m) })
	}
}

// withMode returns o with its test mode made real Options.
func withMode(o ingress.Options) ingress.Options {
	if o.Mode == modeEpollNetpoller {
		o.Mode, o.NetpollWait = ingress.ModeEpoll, true
	}
	return o
}

// serve starts an Ingress on a random loopback port with o (Mode set by the
// caller) and closes it when the test ends.
func serve(t testing.TB, o ingress.Options) *ingress.Ingress {
	t.Helper()
	o = withMode(o)
	o.Listen = []string{"127.0.0.1:0"}
	if o.Loops == 0 {
		o.Loops = 2
	}
	ing, err := ingress.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ing.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ing
}

// waitFor polls cond until it holds, failing the test after waitTime.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTime)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitStats polls ing's counters until ok holds: a loop publishes them once
// per round, so a count may lag the answer that the client has already seen.
func waitStats(t testing.TB, ing *ingress.Ingress, what string, ok func(s ingress.Stats) bool) ingress.Stats {
	t.Helper()
	deadline := time.Now().Add(waitTime)
	for {
		s := ing.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; stats: %+v", what, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// client speaks raw frames to an Ingress.
type client struct {
	t   testing.TB
	nc  net.Conn
	buf []byte
}

func dial(t testing.TB, ing *ingress.Ingress) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", ing.Addrs()[0].String(), waitTime)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc}
}

func (c *client) send(frames ...[]byte) {
	c.t.Helper()
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	c.nc.SetWriteDeadline(time.Now().Add(waitTime))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// next returns the next frame the server sent.
func (c *client) next() proto.Frame {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitTime))
	for {
		f, n, err := proto.NextResponse(c.buf)
		if err != nil {
			c.t.Fatalf("server sent a bad frame: %v", err)
		}
		if n > 0 {
			f.Body = append([]byte(nil), f.Body...)
			c.buf = c.buf[:copy(c.buf, c.buf[n:])]
			return f
		}
		var b [4096]byte
		k, err := c.nc.Read(b[:])
		c.buf = append(c.buf, b[:k]...)
		if err != nil && k == 0 {
			c.t.Fatalf("waiting for a frame: %v", err)
		}
	}
}

// expect returns the next frame, failing unless it has type typ and stamp.
func (c *client) expect(typ proto.Type, stamp uint64) proto.Frame {
	c.t.Helper()
	f := c.next()
	if f.Type != typ || f.Stamp != stamp {
		c.t.Fatalf("got %v stamp %d (body %x); want %v stamp %d", f.Type, f.Stamp, f.Body, typ, stamp)
	}
	return f
}

// expectError expects ERROR code and then the end of the connection.
func (c *client) expectError(code uint8, stamp uint64) {
	c.t.Helper()
	if got := c.expect(proto.Error, stamp).ErrorCode(); got != code {
		c.t.Fatalf("got ERROR %d; want ERROR %d", got, code)
	}
	c.expectClosed()
}

// expectClosed expects EOF (or a reset, when the server closed with unread
// input) and no further bytes.
func (c *client) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitTime))
	var b [64]byte
	n, err := c.nc.Read(b[:])
	if n > 0 || len(c.buf) > 0 {
		c.t.Fatalf("got %d more bytes; want the connection closed", n+len(c.buf))
	}
	if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		c.t.Fatalf("got %v; want EOF", err)
	}
}

// loginFrame is a LOGIN without a token.
func loginFrame(stamp uint64, user uint32) []byte { return proto.AppendLogin(nil, stamp, user, nil) }

// recorder is the one stage of a test SET: it records what it sees and,
// like a minimal egress, answers KLogin with LOGIN_ACK 0 on the socket, shuts
// a connection down on KFatal and releases it on KDisconnect.
type recorder struct {
	set int

	mu   sync.Mutex
	recs []rec

	hold    atomic.Bool   // when set, the next batch blocks...
	blocked chan struct{} // ...after saying so here...
	gate    chan struct{} // ...until this is closed

	keepDisconnected chan conn.Handle // non-nil: hand KDisconnect's conn here instead of releasing
}

// rec is a recorded event with a copy of its Buf.
type rec struct {
	ev  event.Event
	buf []byte
}

func (r *recorder) Handle(b event.Batch) {
	if r.hold.Load() {
		r.blocked <- struct{}{}
		<-r.gate
	}
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		x := rec{ev: *ev}
		if ev.Buf != nil {
			x.buf = append([]byte(nil), ev.Buf.B...)
			bytebufferpool.Put(ev.Buf)
		}
		r.mu.Lock()
		r.recs = append(r.recs, x)
		r.mu.Unlock()
		switch ev.Kind {
		case event.KLogin:
			unix.Write(ev.Conn.C.FD, proto.AppendLoginAck(nil, ev.Stamp, proto.LoginOK, ev.User))
		case event.KFatal:
			if ev.Conn.Live() {
				ev.Conn.C.Owner.Shutdown(ev.Conn.C) // as the egress cuts it off
			}
		case event.KDisconnect:
			if r.keepDisconnected != nil {
				r.keepDisconnected <- ev.Conn
			} else {
				ev.Conn.C.Owner.Release(ev.Conn.C)
			}
		}
	}
}

// events returns a copy of what r has recorded.
func (r *recorder) events() []rec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rec(nil), r.recs...)
}

// wait returns the first recorded event of kind after the first skip ones.
func (r *recorder) wait(t testing.TB, kind event.Kind) rec {
	t.Helper()
	var got rec
	waitFor(t, fmt.Sprintf("a %v event in SET %d", kind, r.set), func() bool {
		for _, x := range r.events() {
			if x.ev.Kind == kind {
				got = x
				return true
			}
		}
		return false
	})
	return got
}

func (r *recorder) count(kind event.Kind) int {
	n := 0
	for _, x := range r.events() {
		if x.ev.Kind == kind {
			n++
		}
	}
	return n
}

// newBus makes sets rings of size slots, each with a recorder as its only
// stage, and closes them when the test ends (after the ingress: cleanups run
// last first).
func newBus(t testing.TB, sets, size, headroom int) (*event.Bus, []*recorder) {
	t.Helper()
	var rings []*event.Ring
	var recs []*recorder
	for set := range sets {
		r, err := ring.New[event.Event](ring.Options{Size: size, Producers: ring.MultiProducer})
		if err != nil {
			t.Fatal(err)
		}
		rc := &recorder{set: set, blocked: make(chan struct{}, 1), gate: make(chan struct{})}
		r.AddStage(rc, ring.StageOptions[event.Event]{Name: "recorder"})
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		rings, recs = append(rings, r), append(recs, rc)
	}
	bus := event.NewBus(rings, headroom)
	t.Cleanup(func() {
		for _, rc := range recs {
			rc.hold.Store(false)
			select {
			case <-rc.gate:
			default:
				close(rc.gate)
			}
		}
		bus.Close()
	})
	return bus, recs
}

// login logs user in over a new connection and returns it with its KLogin.
func login(t testing.TB, ing *ingress.Ingress, rc *recorder, user uint32, stamp uint64) (*client, rec) {
	t.Helper()
	c := dial(t, ing)
	c.send(loginFrame(stamp, user))
	c.expect(proto.LoginAck, stamp)
	var got rec
	waitFor(t, "KLogin", func() bool {
		for _, x := range rc.events() {
			if x.ev.Kind == event.KLogin && x.ev.User == user && x.ev.Stamp == stamp {
				got = x
				return true
			}
		}
		return false
	})
	return c, got
}

// countFrames counts the whole response frames in b, allocating nothing.
func countFrames(b []byte) int {
	n := 0
	for {
		_, used, err := proto.NextResponse(b)
		if err != nil || used == 0 {
			return n
		}
		b, n = b[used:], n+1
	}
}

// stamps returns the stamps of the response frames in b.
func stamps(b []byte) []uint64 {
	var s []uint64
	for {
		f, used, err := proto.NextResponse(b)
		if err != nil || used == 0 {
			return s
		}
		b, s = b[used:], append(s, f.Stamp)
	}
}
