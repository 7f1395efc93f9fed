package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hongbao/client"
	"hongbao/proto"
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{a.addr()}, client.ReconnectWait(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	if c.Addr() != b.addr() {
		t.Fatalf("logged in at %s; want the owner %s", c.Addr(), b.addr())
	}
	move.Store(true)
	if _, err := c.Ping(ctx); !errors.Is(err, client.ErrMoved) {
		t.Fatalf("a request in flight at ERROR 9: %v; want ErrMoved", err)
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
