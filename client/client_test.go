package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/proto"
)

// gateway is a scripted server: answer decides what each request gets.
type gateway struct {
	ln     net.Listener
	answer func(g *gateway, c net.Conn, f proto.Frame) []byte
	logins atomic.Int64
	mu     sync.Mutex
	conns  []net.Conn
}

func newGateway(t *testing.T, answer func(g *gateway, c net.Conn, f proto.Frame) []byte) *gateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, ln, answer)
}

// serveGateway answers with answer on ln's connections (a TLS listener's
// too) until the test ends.
func serveGateway(t *testing.T, ln net.Listener, answer func(g *gateway, c net.Conn, f proto.Frame) []byte) *gateway {
	g := &gateway{ln: ln, answer: answer}
	t.Cleanup(func() { ln.Close(); g.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			g.conns = append(g.conns, c)
			g.mu.Unlock()
			go g.serve(c)
		}
	}()
	return g
}

func (g *gateway) addr() string { return g.ln.Addr().String() }

// serve answers each read's requests in reverse order: answers match
// requests by stamp, not by order.
func (g *gateway) serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 0, 1<<16)
	var answers [][]byte
	for {
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		off := 0
		answers = answers[:0]
		for {
			f, size, perr := proto.NextRequest(buf[off:])
			if perr != nil || size == 0 {
				break
			}
			off += size
			if f.Type == proto.Login {
				g.logins.Add(1)
			}
			if out := g.answer(g, c, f); out != nil {
				answers = append(answers, out)
			}
		}
		var out []byte
		for i := len(answers) - 1; i >= 0; i-- {
			out = append(out, answers[i]...)
		}
		if _, werr := c.Write(out); werr != nil {
			return
		}
		buf = buf[:copy(buf, buf[off:])]
		if err != nil {
			return
		}
	}
}

func (g *gateway) closeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// owner answers as the user's gateway: every SHAKE gets its stamp as the
// envelope id, behind an ENVELOPE push whose stamp is the SHAKE's too.
func owner(g *gateway, c net.Conn, f proto.Frame) []byte {
	switch f.Type {
	case proto.Login:
		user, _ := f.Login()
		return proto.AppendLoginAck(nil, f.Stamp, proto.LoginOK, user)
	case proto.Shake:
		out := proto.AppendEnvelope(nil, f.Stamp, 1<<51|f.Stamp, 2, 100, 3)
		return proto.AppendShakeResult(out, f.Stamp, proto.ShakeGot, f.Stamp, 7)
	case proto.Ping:
		return proto.AppendPong(nil, f.Stamp)
	}
	return proto.AppendError(nil, 0, proto.ErrCodeUnknownType)
}

// dialLogin dials addr, reconnecting within 1–10 ms, and logs user 5 in;
// the Client and the context, of 20 s, end with the test.
func dialLogin(t *testing.T, addr string) (*client.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	c, err := client.Dial(ctx, []string{addr}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	return c, ctx
}

// TestPipelined: many requests in flight on one connection, answered out
// of order, each gets its own answer; a push with a stamp that is also a
// request's goes to Pushes, not to the request.
func TestPipelined(t *testing.T) {
	g := newGateway(t, owner)
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{g.addr()}, client.PushBuffer(2000))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seen := sync.Map{}
	var wrong atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				env, amount, err := c.Shake(ctx)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if _, dup := seen.LoadOrStore(env, true); dup || amount != 7 {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := wrong.Load(); n != 0 {
		t.Fatalf("%d answers duplicated or wrong", n)
	}
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	if n != 2000 {
		t.Fatalf("%d distinct answers of 2000 shakes", n)
	}
	for i := range 2000 {
		p := <-c.Pushes()
		if p.Type != proto.Envelope || p.Sender != 2 || p.Total != 100 || p.Shares != 3 || p.Envelope != 1<<51|p.Stamp {
			t.Fatalf("push %d: %+v", i, p)
		}
	}
}

// TestRedirectAndMove: gateway a sends the user to b (LOGIN_ACK 3); b
// serves, then moves the user's SET away (ERROR 9) with a request in
// flight. That request fails with ErrMoved; the client logs in again by
// itself, through a's redirect, and serves the next request.
func TestRedirectAndMove(t *testing.T) {
	b := newGateway(t, nil)
	var move atomic.Bool
	b.answer = func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Ping && move.CompareAndSwap(true, false) {
			c.Write(proto.AppendError(nil, 0, proto.ErrCodeMoved))
			c.Close()
			return nil
		}
		return owner(g, c, f)
	}
	a := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Login {
			user, _ := f.Login()
			out := proto.AppendLoginRedirect(nil, f.Stamp, user, b.addr())
			c.Write(out)
			c.Close()
		}
		return nil
	})
	c, ctx := dialLogin(t, a.addr())
	if c.Addr() != b.addr() {
		t.Fatalf("logged in at %s; want the owner %s", c.Addr(), b.addr())
	}
	move.Store(true)
	if _, err := c.Ping(ctx); !errors.Is(err, client.ErrMoved) || !errors.Is(err, client.ErrConnLost) {
		t.Fatalf("a request in flight at ERROR 9: %v; want ErrMoved and ErrConnLost", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("after the move: %v; want served again", err)
	}
	st := c.Stats()
	if st.Redirects != 2 || st.Reconnects != 1 || a.logins.Load() != 2 || b.logins.Load() != 2 {
		t.Fatalf("stats %+v, logins at a %d, at b %d; want 2 redirects, 1 reconnect, 2 logins each", st, a.logins.Load(), b.logins.Load())
	}
}

// TestNoOwnerRetried: LOGIN_ACK 3 with no address (the SET has no gateway
// yet) is retried until the SET has one.
func TestNoOwnerRetried(t *testing.T) {
	var tries atomic.Int64
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type != proto.Login {
			return nil
		}
		user, _ := f.Login()
		if tries.Add(1) < 3 {
			c.Write(proto.AppendLoginRedirect(nil, f.Stamp, user, ""))
			c.Close()
			return nil
		}
		return proto.AppendLoginAck(nil, f.Stamp, proto.LoginOK, user)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{g.addr()}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 9, nil); err != nil || tries.Load() != 3 {
		t.Fatalf("Login: %v after %d tries; want logged in at the third", err, tries.Load())
	}
}

// TestBadTokenFinal: LOGIN_ACK 1 is not retried.
func TestBadTokenFinal(t *testing.T) {
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		user, _ := f.Login()
		return proto.AppendLoginAck(nil, f.Stamp, proto.LoginBadToken, user)
	})
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{g.addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Login(ctx, 9, []byte("forged"))
	var se *client.StatusError
	if !errors.Is(err, client.ErrBadToken) || !errors.As(err, &se) || se.Answer != proto.LoginAck || se.Status != proto.LoginBadToken {
		t.Fatalf("Login with a bad token: %v; want LOGIN_ACK 1, ErrBadToken", err)
	}
	if g.logins.Load() != 1 {
		t.Fatalf("%d LOGINs; want 1", g.logins.Load())
	}
	if _, _, err := c.Shake(ctx); !errors.Is(err, client.ErrNotLoggedInYet) {
		t.Fatalf("Shake before a Login: %v; want ErrNotLoggedInYet", err)
	}
}

// TestCloseFailsWaiting: Close ends the requests waiting and closes Pushes.
func TestCloseFailsWaiting(t *testing.T) {
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Login {
			user, _ := f.Login()
			return proto.AppendLoginAck(nil, f.Stamp, proto.LoginOK, user)
		}
		return nil // never answers
	})
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{g.addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(ctx, 3, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := c.Ping(ctx); done <- err }()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("a request waiting at Close: %v; want ErrClosed", err)
	}
	if _, ok := <-c.Pushes(); ok {
		t.Fatal("Pushes open after Close")
	}
}

// TestStaleConnection: a gateway that stops answering without closing
// (paused, SIGSTOP) is found out by its unanswered PING: the client drops
// the connection and logs in again by itself.
func TestStaleConnection(t *testing.T) {
	var paused atomic.Bool
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		switch {
		case f.Type == proto.Login:
			user, _ := f.Login()
			return proto.AppendLoginAck(nil, f.Stamp, proto.LoginOK, user)
		case paused.Load():
			return nil
		}
		return owner(g, c, f)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logins := make(chan string, 16)
	c, err := client.Dial(ctx, []string{g.addr()}, client.PingInterval(20*time.Millisecond),
		client.ReconnectWait(time.Millisecond, 10*time.Millisecond), client.OnLogin(func(addr string) { logins <- addr }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	<-logins
	paused.Store(true)
	select {
	case <-logins:
	case <-ctx.Done():
		t.Fatal("no new login after the gateway went silent")
	}
	paused.Store(false)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("after the new login: %v", err)
	}
	if st := c.Stats(); st.Stale == 0 || st.Reconnects == 0 {
		t.Fatalf("stats %+v; want a stale connection dropped and a reconnect", st)
	}
}

// TestSilentLoginGivenUp: a gateway that takes connections but answers
// nothing, LOGIN included (paused: the kernel accepts for it), is given up
// after DialTimeout like one that refuses, and the next address serves.
func TestSilentLoginGivenUp(t *testing.T) {
	var paused atomic.Bool
	silent := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if paused.Load() {
			return nil
		}
		return owner(g, c, f)
	})
	other := newGateway(t, owner)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logins := make(chan string, 16)
	// The silent gateway twice: the first reconnect dials it again.
	c, err := client.Dial(ctx, []string{silent.addr(), silent.addr(), other.addr()}, client.DialTimeout(100*time.Millisecond),
		client.PingInterval(20*time.Millisecond), client.ReconnectWait(time.Millisecond, 10*time.Millisecond),
		client.OnLogin(func(addr string) { logins <- addr }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	<-logins
	paused.Store(true)
	for {
		select {
		case addr := <-logins:
			if addr == other.addr() {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no login at the other gateway: stuck on a LOGIN the silent one never answers (stats %+v)", c.Stats())
		}
	}
}

// TestRedirectToFailedShunned: while a gateway's SET fails over, the
// others still send its users to it for a moment (it was heard lately). A
// Client that just found it silent does not follow them there, where each
// LOGIN would cost DialTimeout, but asks again elsewhere until it is sent
// to the SET's new owner.
func TestRedirectToFailedShunned(t *testing.T) {
	var paused atomic.Bool
	var accepted atomic.Int64 // connections the silent gateway took while paused
	silent := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if paused.Load() {
			if f.Type == proto.Login {
				accepted.Add(1)
			}
			return nil
		}
		return owner(g, c, f)
	})
	owner2 := newGateway(t, owner)
	var moved atomic.Bool
	other := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type != proto.Login {
			return owner(g, c, f)
		}
		user, _ := f.Login()
		to := silent.addr()
		if moved.Load() {
			to = owner2.addr()
		}
		return proto.AppendLoginRedirect(nil, f.Stamp, user, to)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	logins := make(chan string, 16)
	c, err := client.Dial(ctx, []string{silent.addr(), other.addr()}, client.DialTimeout(5*time.Second),
		client.PingInterval(20*time.Millisecond), client.ReconnectWait(time.Millisecond, 10*time.Millisecond),
		client.OnLogin(func(addr string) { logins <- addr }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	<-logins
	paused.Store(true)
	for c.Stats().Shunned < 3 { // sent to the silent one, and not gone
		if ctx.Err() != nil {
			t.Fatalf("stats %+v: no redirect to the silent gateway passed over", c.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	moved.Store(true)
	for addr := ""; addr != owner2.addr(); {
		select {
		case addr = <-logins:
		case <-ctx.Done():
			t.Fatalf("no login at the SET's new owner (stats %+v)", c.Stats())
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("%d LOGINs sent to the silent gateway after it was found silent; want none", n)
	}
}

// TestReplacedFinal: ERROR 5 (a newer LOGIN of the same user replaced the
// connection) ends the Client for good: no dial again, which would replace
// the newer one in turn; the request in flight gets ErrReplaced with
// ErrConnLost, the next ones the *ServerError, and the callbacks tell.
func TestReplacedFinal(t *testing.T) {
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Ping {
			c.Write(proto.AppendError(nil, 0, proto.ErrCodeReplaced))
			c.Close()
			return nil
		}
		return owner(g, c, f)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events := make(chan string, 16)
	c, err := client.Dial(ctx, []string{g.addr()}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond),
		client.OnDisconnect(func(addr string, err error) {
			events <- fmt.Sprintf("disconnect %v", errors.Is(err, client.ErrReplaced))
		}),
		client.OnStop(func(err error) { events <- fmt.Sprintf("stop %v", errors.Is(err, client.ErrReplaced)) }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx); !errors.Is(err, client.ErrReplaced) || !errors.Is(err, client.ErrConnLost) {
		t.Fatalf("a request in flight at ERROR 5: %v; want ErrReplaced and ErrConnLost", err)
	}
	for _, want := range []string{"disconnect true", "stop true"} {
		if got := <-events; got != want {
			t.Fatalf("callback %q; want %q", got, want)
		}
	}
	var se *client.ServerError
	if _, _, err := c.Shake(ctx); !errors.As(err, &se) || se.Code != proto.ErrCodeReplaced || errors.Is(err, client.ErrConnLost) {
		t.Fatalf("a request after ERROR 5: %v; want the *ServerError of ERROR 5", err)
	}
	time.Sleep(50 * time.Millisecond) // many backoffs: a dial again would have come
	if n := g.logins.Load(); n != 1 {
		t.Fatalf("%d LOGINs; want 1: ERROR 5 is final", n)
	}
	if st := c.Stats(); st.Reconnects != 0 || st.DialErrors != 0 {
		t.Fatalf("stats %+v; want no reconnect", st)
	}
}

// TestReplacedByTwin: two Clients of one user on a real server. The
// second's LOGIN replaces the first, which stops; they do not take turns.
func TestReplacedByTwin(t *testing.T) {
	addr, stop := startServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cs [2]*client.Client
	for i := range cs {
		c, err := client.Dial(ctx, []string{addr}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Login(ctx, 11, nil); err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	for {
		_, err := cs[0].Ping(ctx)
		if errors.Is(err, client.ErrReplaced) {
			break
		}
		if err != nil && !errors.Is(err, client.ErrReplaced) || ctx.Err() != nil {
			t.Fatalf("the replaced Client: %v; want ErrReplaced", err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	for range 3 {
		if _, err := cs[1].Ping(ctx); err != nil {
			t.Fatalf("the newer Client: %v", err)
		}
	}
	if st := cs[0].Stats(); st.Reconnects != 0 {
		t.Fatalf("the replaced Client logged in again: %+v", st)
	}
}

// TestMaxReconnects: with the gateway gone, the Client tries to log in
// again as many times as MaxReconnects allows, then stops; OnStop and the
// requests after it tell why.
func TestMaxReconnects(t *testing.T) {
	g := newGateway(t, owner)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	c, err := client.Dial(ctx, []string{g.addr()}, client.ReconnectWait(time.Millisecond, 5*time.Millisecond),
		client.MaxReconnects(3), client.OnStop(func(err error) { stopped <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	g.ln.Close() // connections refused from now on
	g.closeAll()
	var why error
	select {
	case why = <-stopped:
	case <-ctx.Done():
		t.Fatal("the Client did not stop")
	}
	if st := c.Stats(); st.DialErrors != 3 || st.Reconnects != 0 {
		t.Fatalf("stats %+v; want 3 dials failed, no reconnect", st)
	}
	if _, err := c.Ping(ctx); err == nil || err.Error() != why.Error() {
		t.Fatalf("a request after the Client stopped: %v; want %v", err, why)
	}
}

// TestReconnectCallbacks: a connection lost is told by OnDisconnect, the
// login again by OnLogin, in that order; a callback may call the Client.
func TestReconnectCallbacks(t *testing.T) {
	g := newGateway(t, owner)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events := make(chan string, 16)
	var c *client.Client
	c, err := client.Dial(ctx, []string{g.addr()}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond),
		client.OnLogin(func(addr string) { events <- "login " + addr + " " + c.Addr() }),
		client.OnDisconnect(func(addr string, err error) {
			events <- fmt.Sprintf("disconnect %s %v", addr, errors.Is(err, client.ErrConnLost))
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	login := "login " + g.addr() + " " + g.addr()
	if got := <-events; got != login {
		t.Fatalf("callback %q; want %q", got, login)
	}
	g.closeAll()
	for _, want := range []string{"disconnect " + g.addr() + " true", login} {
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("callback %q; want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no callback; want %q", want)
		}
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDroppedPushesLogged: pushes past PushBuffer are dropped and counted;
// the log says so once, not once a push.
func TestDroppedPushesLogged(t *testing.T) {
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Ping {
			var out []byte
			for i := range uint64(100) {
				out = proto.AppendEnvelope(out, i, 1<<51|i, 2, 100, 3)
			}
			return proto.AppendPong(out, f.Stamp)
		}
		return owner(g, c, f)
	})
	ctx := context.Background()
	var logged bytes.Buffer
	var mu sync.Mutex
	c, err := client.Dial(ctx, []string{g.addr()}, client.PushBuffer(10),
		client.Logger(slog.New(slog.NewTextHandler(&lockedWriter{&mu, &logged}, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(ctx); err != nil { // answered after its pushes
		t.Fatal(err)
	}
	if st := c.Stats(); st.DroppedPushes != 90 {
		t.Fatalf("%d pushes dropped; want 90", st.DroppedPushes)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := bytes.Count(logged.Bytes(), []byte("pushes dropped")); n != 1 {
		t.Fatalf("%d log lines of dropped pushes; want 1:\n%s", n, logged.Bytes())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestMoneyResentWithItsID: a SHAKE, an OPEN and a SEND in flight when the
// connection drops (or the gateway sends ERROR 9) are sent again, with the
// same request id, on the next login's connection, and their callers get
// the answer to the retry, never ErrConnLost; each request of the caller
// has an id of its own. A CHAT in flight is not sent again.
func TestMoneyResentWithItsID(t *testing.T) {
	var mu sync.Mutex
	ids := map[proto.Type][]uint64{}
	var drops atomic.Int64
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		switch f.Type {
		case proto.Shake, proto.Open, proto.Send:
			mu.Lock()
			ids[f.Type] = append(ids[f.Type], f.RequestID())
			first := len(ids[f.Type]) == 1
			mu.Unlock()
			if first { // the first of each: no answer, the connection goes
				if drops.Add(1) == 2 {
					c.Write(proto.AppendError(nil, 0, proto.ErrCodeMoved))
				}
				c.Close()
				return nil
			}
		}
		switch f.Type {
		case proto.Open:
			return proto.AppendOpenResult(nil, f.Stamp, proto.OpenOK, f.Open(), 9)
		case proto.Send:
			return proto.AppendSendAck(nil, f.Stamp, proto.SendOK, 77)
		case proto.Chat:
			c.Close()
			return nil
		}
		return owner(g, c, f)
	})
	c, ctx := dialLogin(t, g.addr())
	if _, amount, err := c.Shake(ctx); err != nil || amount != 7 {
		t.Fatalf("Shake across a dropped connection: %d, %v; want the retry's answer", amount, err)
	}
	if amount, err := c.Open(ctx, 1<<40|3); err != nil || amount != 9 {
		t.Fatalf("Open across ERROR 9: %d, %v; want the retry's answer", amount, err)
	}
	if env, err := c.Send(ctx, 100, []uint32{6, 7}); err != nil || env != 77 {
		t.Fatalf("Send across a dropped connection: %#x, %v; want the retry's answer", env, err)
	}
	if _, _, err := c.Shake(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Chat(ctx, 6, []byte("hi")); !errors.Is(err, client.ErrConnLost) {
		t.Fatalf("a Chat in flight when the connection dropped: %v; want ErrConnLost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for typ, want := range map[proto.Type]int{proto.Shake: 3, proto.Open: 2, proto.Send: 2} {
		got := ids[typ]
		if len(got) != want || got[0] == 0 || got[0] != got[1] {
			t.Errorf("%v: request ids %#x; want %d, the first two the same", typ, got, want)
		}
	}
	if s := ids[proto.Shake]; len(s) == 3 && s[2] == s[0] {
		t.Errorf("two Shake calls sent the same request id %#x", s[0])
	}
	if st := c.Stats(); st.Resent != 3 || st.Reconnects < 3 {
		t.Errorf("stats %+v; want 3 requests resent, a reconnect for each", st)
	}
}

// TestWithRequestID: a Shake whose context ends before the answer is called
// again with WithRequestID and the same id; the gateway sees that id both
// times, and without WithRequestID each call has an id of its own.
func TestWithRequestID(t *testing.T) {
	var mu sync.Mutex
	var ids []uint64
	g := newGateway(t, func(g *gateway, c net.Conn, f proto.Frame) []byte {
		if f.Type == proto.Shake {
			mu.Lock()
			ids = append(ids, f.RequestID())
			first := len(ids) == 1
			mu.Unlock()
			if first {
				return nil // no answer: the caller's context ends
			}
		}
		return owner(g, c, f)
	})
	c, ctx := dialLogin(t, g.addr())
	id := client.NewRequestID()
	short, cancel := context.WithTimeout(client.WithRequestID(ctx, id), 50*time.Millisecond)
	defer cancel()
	if _, _, err := c.Shake(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Shake with no answer: %v; want its context's deadline", err)
	}
	if _, amount, err := c.Shake(client.WithRequestID(ctx, id)); err != nil || amount != 7 {
		t.Fatalf("the Shake called again with its id: %d, %v", amount, err)
	}
	if _, _, err := c.Shake(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 3 || ids[0] != id || ids[1] != id || ids[2] == id || ids[2] == 0 {
		t.Fatalf("request ids %#x; want %#x twice, then another", ids, id)
	}
}
