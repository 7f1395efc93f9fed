package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/campaign"
	hbclient "github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// ingressMode is the -ingress of every test server: go test ./server/ -args
// -ingress=netpoll runs the whole suite on the goroutine-per-connection
// ingress.
var ingressMode = flag.String("ingress", "epoll", "the test servers' -ingress: epoll or netpoll")

// waitTime bounds every wait of these tests: an answer, a close, a figure
// reaching its value. Nothing here sleeps and hopes; everything polls or
// blocks until its condition holds or waitTime runs out.
const waitTime = 30 * time.Second

// testServer is a server started in this process on random loopback ports.
type testServer struct {
	*server.Server
	t     testing.TB
	opts  server.Options
	addr  string // the client listener
	admin string // base URL of the admin API
	token string // admin token the helpers send, if any
	hc    *http.Client

	stopOnce sync.Once
	stopErr  error
}

// startServer starts a server with small SETs and rings (so cross-SET paths
// and full rings are exercised), lets edit change the options, and shuts it
// down when the test ends.
func startServer(t testing.TB, edit func(o *server.Options)) *testServer {
	t.Helper()
	o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Sets: 4, Ring: 128, Loops: 2,
		Ingress: *ingressMode, Pipeline: *pipelineMode, Stages: *stagesMode, Data: t.TempDir()}
	if edit != nil {
		edit(&o)
	}
	o.Fill()
	lw := &testLogWriter{t: t}
	s, err := server.New(o, slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ts := &testServer{Server: s, t: t, opts: o, addr: s.Addrs()[0].String(), admin: "http://" + s.AdminAddr(),
		token: o.AdminToken, hc: &http.Client{Transport: &http.Transport{}, Timeout: waitTime}}
	t.Cleanup(func() {
		if err := ts.shutdown(); err != nil && !errors.As(err, new(*server.LostError)) { // a fenced gateway's: its test checks it
			t.Errorf("Shutdown: %v", err)
		}
		ts.hc.CloseIdleConnections()
		lw.close()
	})
	return ts
}

// shutdown shuts the server down once; later calls return the first result.
func (ts *testServer) shutdown() error {
	ts.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTime)
		defer cancel()
		ts.stopErr = ts.Shutdown(ctx)
	})
	return ts.stopErr
}

// testLogWriter forwards the server's warnings to the test log until the
// test's cleanup, after which t.Log would panic.
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Logf("server: %s", strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testLogWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// waitFor polls cond until it holds, failing the test after waitTime.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTime)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTime, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ---- admin API ----

// do makes an admin request and returns the status code and body.
func (ts *testServer) do(method, path, token string) (int, []byte) {
	ts.t.Helper()
	send := func() (*http.Response, error) {
		req, err := http.NewRequest(method, ts.admin+path, nil)
		if err != nil {
			ts.t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return ts.hc.Do(req)
	}
	resp, err := send()
	if errors.Is(err, io.EOF) {
		// A kept-alive connection the server closed (a shutdown closes its
		// idle ones) as the request went out on it: never read. Once more,
		// on a new one.
		ts.hc.CloseIdleConnections()
		resp, err = send()
	}
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, body
}

// getJSON GETs path, requires 200 and decodes the body into v.
func (ts *testServer) getJSON(path string, v any) {
	ts.t.Helper()
	code, body := ts.do(http.MethodGet, path, ts.token)
	if code != http.StatusOK {
		ts.t.Fatalf("GET %s: %d %s; want 200", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		ts.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// stats reads GET /stats.
func (ts *testServer) stats() server.Stats {
	ts.t.Helper()
	var st server.Stats
	ts.getJSON("/stats", &st)
	return st
}

// campaigns reads GET /campaigns.
func (ts *testServer) campaigns() []campaign.Status {
	ts.t.Helper()
	var cs []campaign.Status
	ts.getJSON("/campaigns", &cs)
	return cs
}

// startCampaign POSTs /campaigns/kind?query and requires 200.
func (ts *testServer) startCampaign(kind, query string) campaign.Status {
	ts.t.Helper()
	path := "/campaigns/" + kind + "?" + query
	code, body := ts.do(http.MethodPost, path, ts.token)
	if code != http.StatusOK {
		ts.t.Fatalf("POST %s: %d %s; want 200", path, code, body)
	}
	var st campaign.Status
	if err := json.Unmarshal(body, &st); err != nil {
		ts.t.Fatalf("POST %s: %v in %s", path, err, body)
	}
	if st.ID == 0 {
		ts.t.Fatalf("POST %s: answered %s; want a campaign id", path, body)
	}
	return st
}

// waitCampaign waits until campaign id is done and returns its final status.
func (ts *testServer) waitCampaign(id int) campaign.Status {
	ts.t.Helper()
	var st campaign.Status
	waitFor(ts.t, fmt.Sprintf("campaign %d to finish", id), func() bool {
		for _, c := range ts.campaigns() {
			if c.ID == id {
				st = c
				return c.Done
			}
		}
		ts.t.Fatalf("campaign %d not in GET /campaigns", id)
		return false
	})
	if st.Dealt != st.Total {
		ts.t.Fatalf("campaign %d done with %d of %d dealt", id, st.Dealt, st.Total)
	}
	return st
}

// checkShakeLedger fails unless the shake ledger balances right now.
func checkShakeLedger(t testing.TB, st server.Stats) {
	t.Helper()
	if err := st.CheckShake(); err != nil {
		t.Error(err)
	}
}

// checkEnvelopeLedger fails unless the group envelope ledger balances.
func checkEnvelopeLedger(t testing.TB, st server.Stats) {
	t.Helper()
	if err := st.CheckEnvelopes(); err != nil {
		t.Error(err)
	}
}

// ---- protocol client ----

// client speaks the protocol to a test server over one connection, through
// wire.Conn. Its methods fail the test, so call them from the test's
// goroutine only; workers use the error-returning try* methods.
type client struct {
	t     testing.TB
	c     *wire.Conn
	user  uint32
	stamp uint64

	early  map[uint64]proto.Frame // answers read while waiting for another stamp
	pushes []proto.Frame          // ENVELOPE and CHAT_DELIVER read while waiting for answers
}

// dial connects to ts and closes the connection when the test ends.
func dial(t testing.TB, ts *testServer) *client {
	t.Helper()
	c, err := wire.Dial(ts.addr, waitTime)
	if err != nil {
		t.Fatalf("dial %s: %v", ts.addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, stamp: 1000, early: map[uint64]proto.Frame{}}
}

// login dials ts and logs in as user (no token).
func login(t testing.TB, ts *testServer, user uint32) *client {
	t.Helper()
	c := dial(t, ts)
	c.login(user, nil)
	return c
}

func (c *client) login(user uint32, token []byte) {
	c.t.Helper()
	st := c.loginStatus(user, token)
	if st != proto.LoginOK {
		c.t.Fatalf("LOGIN user %d: status %d; want 0", user, st)
	}
	c.user = user
}

// loginStatus sends LOGIN and returns the LOGIN_ACK status, checking its
// stamp and user.
func (c *client) loginStatus(user uint32, token []byte) uint8 {
	c.t.Helper()
	s := c.nextStamp()
	c.send(proto.AppendLogin(nil, s, user, token))
	st, u := c.expect(proto.LoginAck, s).LoginAck()
	if u != user {
		c.t.Fatalf("LOGIN_ACK for user %d; want %d", u, user)
	}
	return st
}

func (c *client) nextStamp() uint64 {
	c.stamp++
	return c.stamp
}

// send writes frames (or any bytes) whole.
func (c *client) send(frames ...[]byte) {
	c.t.Helper()
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	c.c.SetWriteDeadline(time.Now().Add(waitTime))
	if err := c.c.Send(b); err != nil {
		c.t.Fatalf("user %d: write: %v", c.user, err)
	}
}

// next returns the next frame from the server.
func (c *client) next() proto.Frame {
	c.t.Helper()
	f, err := c.c.Next(waitTime)
	if err != nil {
		c.t.Fatalf("user %d: reading the next frame: %v", c.user, err)
	}
	return f
}

// expect requires the next frame to be of type typ with stamp.
func (c *client) expect(typ proto.Type, stamp uint64) proto.Frame {
	c.t.Helper()
	f := c.next()
	if f.Type != typ || f.Stamp != stamp {
		c.t.Fatalf("user %d: got %s; want %v stamp %d", c.user, describe(f), typ, stamp)
	}
	return f
}

// answer returns the answer with stamp, which may come after other answers
// (kept for later calls) and pushes (kept in c.pushes).
func (c *client) answer(stamp uint64) proto.Frame {
	c.t.Helper()
	f, err := c.tryAnswer(stamp)
	if err != nil {
		c.t.Fatalf("user %d: %v", c.user, err)
	}
	return f
}

func (c *client) tryAnswer(stamp uint64) (proto.Frame, error) {
	if f, ok := c.early[stamp]; ok {
		delete(c.early, stamp)
		return f, nil
	}
	deadline := time.Now().Add(waitTime)
	for {
		f, err := c.c.Next(time.Until(deadline))
		if err != nil {
			return f, fmt.Errorf("waiting for the answer with stamp %d: %w", stamp, err)
		}
		switch {
		case f.Type == proto.Error:
			return f, fmt.Errorf("got ERROR %d waiting for the answer with stamp %d", f.ErrorCode(), stamp)
		case f.Type == proto.Envelope || f.Type == proto.ChatDeliver:
			c.pushes = append(c.pushes, f)
		case f.Stamp == stamp:
			return f, nil
		default:
			if _, dup := c.early[f.Stamp]; dup {
				return f, fmt.Errorf("two answers with stamp %d: %s", f.Stamp, describe(f))
			}
			c.early[f.Stamp] = f
		}
	}
}

// push returns the next push of type typ, reading frames until one comes.
func (c *client) push(typ proto.Type) proto.Frame {
	c.t.Helper()
	for i, f := range c.pushes {
		if f.Type == typ {
			c.pushes = append(c.pushes[:i], c.pushes[i+1:]...)
			return f
		}
	}
	for {
		f := c.next()
		switch {
		case f.Type == typ:
			return f
		case f.Type == proto.Envelope || f.Type == proto.ChatDeliver:
			c.pushes = append(c.pushes, f)
		case f.Type == proto.Error:
			c.t.Fatalf("user %d: got ERROR %d waiting for a %v push", c.user, f.ErrorCode(), typ)
		default:
			c.early[f.Stamp] = f
		}
	}
}

// ping makes one PING round trip: the connection is alive and in order.
func (c *client) ping() {
	c.t.Helper()
	s := c.nextStamp()
	c.send(proto.AppendPing(nil, s))
	if f := c.answer(s); f.Type != proto.Pong {
		c.t.Fatalf("user %d: PING answered by %s; want PONG", c.user, describe(f))
	}
}

// expectError requires the next frame to be ERROR code, then the close.
func (c *client) expectError(code uint8) {
	c.t.Helper()
	f := c.next()
	if f.Type != proto.Error || f.ErrorCode() != code {
		c.t.Fatalf("user %d: got %s; want ERROR %d", c.user, describe(f), code)
	}
	// docs/PROTOCOL.md, Stamps on ERROR: only ERROR 3 echoes a stamp.
	if code != proto.ErrCodeNotLoggedIn && f.Stamp != 0 {
		c.t.Fatalf("user %d: ERROR %d with stamp %d; want stamp 0", c.user, code, f.Stamp)
	}
	c.expectClosed()
}

// expectClosed requires the server to close the connection with no further
// frame: EOF or a reset, not a timeout.
func (c *client) expectClosed() {
	c.t.Helper()
	f, err := c.c.Next(waitTime)
	if err == nil {
		c.t.Fatalf("user %d: got %s; want the connection closed", c.user, describe(f))
	}
	if !isClosed(err) {
		c.t.Fatalf("user %d: %v; want EOF or a reset", c.user, err)
	}
}

// isClosed reports whether err from a read means the peer closed.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// describe formats a frame for failure messages.
func describe(f proto.Frame) string {
	switch f.Type {
	case proto.Error:
		return fmt.Sprintf("ERROR %d (stamp %d)", f.ErrorCode(), f.Stamp)
	case proto.LoginAck:
		st, u := f.LoginAck()
		return fmt.Sprintf("LOGIN_ACK status %d user %d (stamp %d)", st, u, f.Stamp)
	case proto.ShakeResult:
		st, env, amount := f.ShakeResult()
		return fmt.Sprintf("SHAKE_RESULT status %d envelope %#x amount %d (stamp %d)", st, env, amount, f.Stamp)
	case proto.OpenResult:
		st, env, amount := f.OpenResult()
		return fmt.Sprintf("OPEN_RESULT status %d envelope %#x amount %d (stamp %d)", st, env, amount, f.Stamp)
	case proto.SendAck:
		st, env := f.SendAck()
		return fmt.Sprintf("SEND_ACK status %d envelope %#x (stamp %d)", st, env, f.Stamp)
	case proto.ChatAck:
		st, to := f.ChatAck()
		return fmt.Sprintf("CHAT_ACK status %d to %d (stamp %d)", st, to, f.Stamp)
	case proto.Envelope:
		env, sender, total, shares := f.Envelope()
		return fmt.Sprintf("ENVELOPE %#x from %d total %d shares %d", env, sender, total, shares)
	case proto.ChatDeliver:
		from, text := f.ChatDeliver()
		return fmt.Sprintf("CHAT_DELIVER from %d, %d bytes (stamp %d)", from, len(text), f.Stamp)
	}
	return fmt.Sprintf("%v (stamp %d, %d body bytes)", f.Type, f.Stamp, len(f.Body))
}

// rawFrame is a frame header claiming len n and type typ, followed by body
// (which need not match n).
func rawFrame(n int, typ byte, stamp uint64, body []byte) []byte {
	b := []byte{byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for i := range 8 {
		b[4+i] = byte(stamp >> (56 - 8*i))
	}
	return append(b, body...)
}

// goroutineDump returns every goroutine's stack, for a leak report.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// slowReader logs in user on a connection with a 4 KiB receive buffer that
// the test does not read: the kernel absorbs little, so the server's own
// backlog limit (-max-pending) soon matters.
func slowReader(t *testing.T, ts *testServer, user uint32, token []byte) *client {
	t.Helper()
	nc, err := dialer(4096).Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	slow := &client{t: t, c: &wire.Conn{Conn: nc}, stamp: 1, early: map[uint64]proto.Frame{}}
	slow.login(user, token)
	return slow
}

// dialer returns a net.Dialer whose sockets get a receive buffer of rcvbuf
// bytes before they connect (so the window the server sees is small).
func dialer(rcvbuf int) *net.Dialer {
	return &net.Dialer{Timeout: waitTime, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// appLogin logs user in on ts (no token) with package client, as an
// application would, and closes it when the test ends: for tests of flows,
// where the bytes on the wire are not the point.
func appLogin(t testing.TB, ts *testServer, user uint32) *hbclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTime)
	defer cancel()
	c, err := hbclient.Dial(ctx, []string{ts.addr}, hbclient.NoReconnect())
	if err != nil {
		t.Fatalf("dial %s: %v", ts.addr, err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Login(ctx, user, nil); err != nil {
		t.Fatalf("LOGIN user %d: %v", user, err)
	}
	return c
}

// queued is what c's socket holds: bytes sent and not yet acknowledged by
// the peer's kernel (SIOCOUTQ), and bytes received and not yet read
// (SIOCINQ).
func queued(t testing.TB, c net.Conn) (out, in int) {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var oerr, ierr error
	if err := rc.Control(func(fd uintptr) {
		out, oerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		in, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(oerr, ierr); err != nil {
		t.Fatalf("the socket's queues: %v", err)
	}
	return out, in
}
