//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// The SIGTERM test: the real binary, many clients SHAKEing and
// OPENing as fast as the server answers, campaigns running, SIGTERM in the
// middle. It lives here, beside main, because what it checks is main's
// contract: the signal, the exit status, the shutdown deadline and the final
// ledger line main logs on the way out.
const (
	sigUsers       = 300              // connections, one user each
	sigWindow      = 2                // SHAKEs each keeps in flight (closed loop)
	sigLoad        = 2 * time.Second  // load before the SIGTERM
	sigShutdown    = 5 * time.Second  // the server's -shutdown-timeout
	sigClientLimit = 15 * time.Second // a client still reading this long after SIGTERM fails the test
	sigShakeRate   = 20000            // shake campaign: envelopes a second (most SHAKEs get one)
	sigSendRate    = 300              // send campaign: group envelopes a second
	sigRecipients  = 3                // … each to 3 online users
	sigCampaignLen = 600              // s: both campaigns outlive the test
	sigReadTimeout = 20 * time.Second // no frame for this long: a client gives up
	sigStart       = 20 * time.Second // the server serving after its start
	sigStamp0      = uint64(1) << 40  // stamps of SHAKEs: sigStamp0 + n; OPENs: n (n < 2^40)
)

// TestSIGTERMUnderLoad: no answered request is missing from the server's
// final ledger, no envelope is handed out twice, every connection gets
// ERROR 8 before its close, and the process exits 0 within -shutdown-timeout.
func TestSIGTERMUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary under load")
	}
	t0 := time.Now()
	bin := buildServer(t)
	t.Logf("built %s in %v (race: %v)", filepath.Base(bin), time.Since(t0).Round(time.Millisecond), raceEnabled)

	srv := startServer(t, bin, "-shutdown-timeout", sigShutdown.String())
	t.Logf("server pid %d on %s, admin %s", srv.cmd.Process.Pid, srv.listen, srv.admin)

	// Every user logs in first: the send campaign picks online users.
	clients := make([]*sigClient, sigUsers)
	var wg sync.WaitGroup
	loginErrs := make(chan error, sigUsers)
	for i := range clients {
		clients[i] = &sigClient{user: uint32(i + 1)}
		wg.Add(1)
		go func(c *sigClient) {
			defer wg.Done()
			loginErrs <- c.login(srv.listen)
		}(clients[i])
	}
	wg.Wait()
	close(loginErrs)
	for err := range loginErrs {
		if err != nil {
			srv.kill()
			t.Fatalf("login: %v", err)
		}
	}
	for _, c := range []string{
		fmt.Sprintf("shake?rate=%d&total=%d&min=1&max=200", sigShakeRate, sigShakeRate*sigCampaignLen),
		fmt.Sprintf("send?rate=%d&total=%d&recipients=%d&min=%d&max=2000", sigSendRate, sigSendRate*sigCampaignLen, sigRecipients, sigRecipients),
	} {
		if err := srv.post("/campaigns/" + c); err != nil {
			srv.kill()
			t.Fatal(err)
		}
	}

	// The load, then SIGTERM while it runs.
	var run sigRun
	for _, c := range clients {
		wg.Add(1)
		go func(c *sigClient) {
			defer wg.Done()
			c.run(&run)
		}(c)
	}
	time.Sleep(sigLoad)
	before := run.answered.Load()
	inflight := run.sent.Load() - before
	sigAt := time.Now()
	run.sigAt.Store(sigAt.UnixNano())
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		srv.kill()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { <-srv.done; close(exited) }()
	var code int
	var took time.Duration
	select {
	case <-exited:
		took = time.Since(sigAt)
		code = srv.cmd.ProcessState.ExitCode()
	case <-time.After(sigShutdown + 10*time.Second):
		srv.kill()
		t.Fatalf("server still running %v after SIGTERM (-shutdown-timeout %v); log:\n%s", time.Since(sigAt), sigShutdown, srv.logText())
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	select {
	case <-clientsDone:
	case <-time.After(sigClientLimit):
		for _, c := range clients {
			c.nc.Close()
		}
		<-clientsDone
		t.Errorf("clients still reading %v after SIGTERM", sigClientLimit)
	}

	// The verdict.
	t.Logf("load: %d users × %d SHAKEs in flight for %v: %d answers (%.0f/s), %d in flight at SIGTERM",
		sigUsers, sigWindow, sigLoad, before, float64(before)/sigLoad.Seconds(), inflight)
	t.Logf("SIGTERM → exit status %d in %v (-shutdown-timeout %v); %d answers after the signal",
		code, took.Round(time.Millisecond), sigShutdown, run.afterSig.Load())
	if code != 0 {
		t.Errorf("exit status %d after SIGTERM; want 0. Log:\n%s", code, srv.logText())
	}
	if took > sigShutdown {
		t.Errorf("exited %v after SIGTERM; want within -shutdown-timeout %v", took, sigShutdown)
	}
	if bytes.Contains(srv.logBytes(), []byte("shutdown timeout")) {
		t.Errorf("the server waited out -shutdown-timeout for connections that got no ERROR 8 or did not close")
	}
	if before < sigUsers || inflight <= 0 { // loose: a crowded machine slows the load a lot
		t.Errorf("%d answers before SIGTERM, %d in flight at it: want a server under load when the signal came", before, inflight)
	}
	ledger, err := srv.finalLedger()
	if err != nil {
		t.Fatalf("%v; log:\n%s", err, srv.logText())
	}
	checkClients(t, clients, ledger)
}

// checkClients compares what every client received with the server's final
// ledger and checks each connection's ending.
func checkClients(t *testing.T, clients []*sigClient, st server.Stats) {
	t.Helper()
	var got, gotAmount, opened, openedAmount, shakes, empty, error8 uint64
	shakeIDs := map[uint64]uint32{} // envelope → the user who got it
	type group struct {
		total, opened uint64
		shares, oks   int
		pushed        int
	}
	groups := map[uint64]*group{}
	grp := func(env uint64) *group {
		g := groups[env]
		if g == nil {
			g = &group{}
			groups[env] = g
		}
		return g
	}
	var bad []string
	badf := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	for _, c := range clients {
		if c.errCode == proto.ErrCodeShuttingDown {
			error8++
		}
		switch {
		case c.errCode == 0:
			badf("user %d: connection ended without ERROR (%v)", c.user, c.end)
		case c.errCode != proto.ErrCodeShuttingDown:
			badf("user %d: ERROR %d; want 8", c.user, c.errCode)
		case c.end != nil:
			badf("user %d: after ERROR 8: %v; want the close", c.user, c.end)
		}
		if c.protoErr != nil {
			badf("user %d: %v", c.user, c.protoErr)
		}
		for _, r := range c.shakes {
			shakes++
			switch r.status {
			case proto.ShakeGot:
				got++
				gotAmount += uint64(r.amount)
				if r.env == 0 || r.amount == 0 {
					badf("user %d: SHAKE_RESULT 1 with envelope %d, amount %d", c.user, r.env, r.amount)
				}
				if u, dup := shakeIDs[r.env]; dup {
					badf("envelope %d handed out twice: to user %d and user %d", r.env, u, c.user)
				}
				shakeIDs[r.env] = c.user
			case proto.ShakeNothing:
				empty++
			}
		}
		for env, p := range c.pushes {
			g := grp(env)
			g.pushed++
			if g.total != 0 && (g.total != uint64(p.total) || g.shares != int(p.shares)) {
				badf("envelope %d pushed as %d fen / %d shares and as %d / %d", env, g.total, g.shares, p.total, p.shares)
			}
			g.total, g.shares = uint64(p.total), int(p.shares)
		}
		seen := map[uint64]bool{}
		for _, r := range c.opens {
			if r.status != proto.OpenOK {
				continue
			}
			opened++
			openedAmount += uint64(r.amount)
			if seen[r.env] {
				badf("user %d opened envelope %d twice with OPEN_RESULT 0", c.user, r.env)
			}
			seen[r.env] = true
			if _, ok := c.pushes[r.env]; !ok {
				badf("user %d: OPEN_RESULT 0 for envelope %d, never pushed to it", c.user, r.env)
			}
			g := grp(r.env)
			g.oks++
			g.opened += uint64(r.amount)
		}
	}
	for env := range groups {
		if _, dup := shakeIDs[env]; dup {
			badf("envelope %d is both a shake and a group envelope", env)
		}
		if g := groups[env]; g.oks > g.shares || g.opened > g.total || (g.oks == g.shares && g.opened != g.total) {
			badf("group envelope %d (%d fen, %d shares): %d shares opened for %d fen", env, g.total, g.shares, g.oks, g.opened)
		}
	}
	var openUnanswered uint64 // OPENs still in flight when their connection closed
	for _, c := range clients {
		for stamp := range c.pending {
			if stamp < sigStamp0 {
				openUnanswered++
			}
		}
	}
	t.Logf("clients: %d SHAKEs answered (%d got %d fen, %d empty), %d group envelopes pushed, %d OPENs ok (%d fen), ERROR 8 on %d of %d connections",
		shakes, got, gotAmount, empty, len(groups), opened, openedAmount, error8, len(clients))
	t.Logf("server's final ledger: shake got %d (%d fen), created %d fen, pool %d fen, returned %d; envelopes created %d fen, opened %d (%d fen), outstanding %d fen",
		st.Shake.Got, st.Shake.GotAmount, st.Shake.CreatedAmount, st.Shake.PoolAmount, st.Shake.Returned,
		st.Envelopes.CreatedAmount, st.Envelopes.Opened, st.Envelopes.OpenedAmount, st.Envelopes.OutstandingAmount)
	for _, b := range bad {
		t.Error(b)
	}
	if error8 != uint64(len(clients)) {
		t.Errorf("ERROR 8 on %d of %d connections; want every one", error8, len(clients))
	}
	if got == 0 || opened == 0 {
		t.Errorf("clients got %d shake envelopes and opened %d shares: want some of each (campaigns running)", got, opened)
	}
	// OPEN: every share a client got is in the ledger; beside them, the
	// ledger may hold a share for each OPEN still in flight when its
	// connection got ERROR 8: drawn, its answer found the connection gone,
	// and it stays its opener's (a repeated OPEN tells it), never more.
	gap, gapAmount := int64(st.Envelopes.Opened)-int64(opened), int64(st.Envelopes.OpenedAmount)-int64(openedAmount)
	t.Logf("OPEN: %d unanswered at the close; the ledger has %d shares (%d fen) no client received", openUnanswered, gap, gapAmount)
	switch {
	case gap < 0 || gapAmount < 0 || (gap == 0) != (gapAmount == 0):
		t.Errorf("clients got %d shares (%d fen) the ledger does not have (envelopes.opened %d, opened_amount %d)", -gap, -gapAmount, st.Envelopes.Opened, st.Envelopes.OpenedAmount)
	case uint64(gap) > openUnanswered:
		t.Errorf("the ledger has %d shares no client received, more than the %d OPENs in flight at the close", gap, openUnanswered)
	}
	for _, c := range []struct {
		what         string
		client, serv uint64
	}{
		{"Σ SHAKE_RESULT 1 amounts = shake.got_amount", gotAmount, st.Shake.GotAmount},
		{"SHAKE_RESULT 1 count = shake.got", got, st.Shake.Got},
		{"shake.created_amount = got_amount + pool_amount", st.Shake.CreatedAmount, st.Shake.GotAmount + st.Shake.PoolAmount},
		{"envelopes.created_amount = opened_amount + outstanding_amount", st.Envelopes.CreatedAmount, st.Envelopes.OpenedAmount + st.Envelopes.OutstandingAmount},
	} {
		if c.client != c.serv {
			t.Errorf("%s: %d ≠ %d (off by %+d)", c.what, c.client, c.serv, int64(c.client)-int64(c.serv))
		}
	}
}

// sigRun is what the clients share while they run.
type sigRun struct {
	sent, answered atomic.Int64 // SHAKEs
	sigAt          atomic.Int64 // Unix ns of the SIGTERM; 0 before
	afterSig       atomic.Int64 // answers read after it
}

type result struct {
	status uint8
	env    uint64
	amount uint32
}

type sent struct {
	stamp uint64
	end   int
}

type push struct {
	total  uint32
	shares uint16
}

// sigClient is one user on its own connection, in one goroutine: it keeps
// sigWindow SHAKEs in flight, OPENs every ENVELOPE pushed to it and reads
// until the server closes. Only its goroutine touches it until run returns.
type sigClient struct {
	user     uint32
	nc       net.Conn
	buf      []byte
	out      []byte
	outEnds  []sent // the requests in out: stamp and end offset
	shakes   []result
	opens    []result
	pushes   map[uint64]push
	pending  map[uint64]bool // stamps sent and not answered
	next     uint64
	idSec    int64             // with a request id on every SHAKE and OPEN, first sent in this unix second; 0: none
	openEnvs map[uint64]uint64 // with ids: the envelope of each OPEN, by stamp, to send it again
	errCode  uint8             // the ERROR received; 0: none
	end      error             // how the reading ended after the ERROR: nil for EOF (or reset) right after it
	protoErr error             // an answer to nothing, a frame that breaks the protocol
}

func (c *sigClient) login(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	c.nc = nc
	c.pushes, c.pending = map[uint64]push{}, map[uint64]bool{}
	if c.openEnvs == nil {
		c.openEnvs = map[uint64]uint64{}
	}
	if _, err := nc.Write(proto.AppendLogin(nil, 1, c.user, nil)); err != nil {
		return err
	}
	f, err := c.nextFrame()
	if err != nil {
		return fmt.Errorf("user %d: %w", c.user, err)
	}
	if st, u := f.LoginAck(); f.Type != proto.LoginAck || st != proto.LoginOK || u != c.user {
		return fmt.Errorf("user %d: LOGIN answered %v", c.user, f)
	}
	return nil
}

// nextFrame reads the next frame; its Body is valid until the next call.
func (c *sigClient) nextFrame() (proto.Frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(sigReadTimeout))
	for {
		if f, n, err := proto.NextResponse(c.buf); err != nil {
			return f, err
		} else if n > 0 {
			f.Body = append([]byte(nil), f.Body...)
			c.buf = c.buf[:copy(c.buf, c.buf[n:])]
			return f, nil
		}
		var tmp [4096]byte
		k, err := c.nc.Read(tmp[:])
		c.buf = append(c.buf, tmp[:k]...)
		if k == 0 && err != nil {
			if len(c.buf) > 0 && err == io.EOF {
				err = fmt.Errorf("%d bytes of a partial frame, then EOF", len(c.buf))
			}
			return proto.Frame{}, err
		}
	}
}

// reqID is the request id of the client's n-th request, 0 without ids.
func (c *sigClient) reqID(n uint64) uint64 {
	if c.idSec == 0 {
		return 0
	}
	return proto.NewRequestID(c.idSec, uint32(n))
}

// retry sends every request still unanswered again, with its request id, on
// a new connection to addr, and returns what the answers told: the SHAKE
// and OPEN money.
func (c *sigClient) retry(addr string) (shakeSum, openSum uint64, err error) {
	left := c.pending
	if err := c.login(addr); err != nil {
		return 0, 0, err
	}
	defer c.nc.Close()
	var out []byte
	for stamp := range left {
		if stamp >= sigStamp0 {
			out = proto.AppendShakeID(out, stamp, c.reqID(stamp-sigStamp0))
		} else {
			out = proto.AppendOpenID(out, stamp, c.openEnvs[stamp], c.reqID(stamp))
		}
	}
	if _, err := c.nc.Write(out); err != nil {
		return 0, 0, err
	}
	for n := 0; n < len(left); {
		f, err := c.nextFrame()
		if err != nil {
			return 0, 0, fmt.Errorf("user %d: %d of %d retries answered: %w", c.user, n, len(left), err)
		}
		switch f.Type {
		case proto.ShakeResult:
			if st, _, amount := f.ShakeResult(); st == proto.ShakeGot {
				shakeSum += uint64(amount)
			}
		case proto.OpenResult:
			if st, _, amount := f.OpenResult(); st == proto.OpenOK {
				openSum += uint64(amount)
			}
		default:
			continue // ENVELOPE pushes
		}
		n++
	}
	return shakeSum, openSum, nil
}

func (c *sigClient) shake(r *sigRun) {
	c.next++
	stamp := sigStamp0 + c.next
	c.pending[stamp] = true
	c.out = proto.AppendShakeID(c.out, stamp, c.reqID(c.next))
	c.outEnds = append(c.outEnds, sent{stamp, len(c.out)})
	r.sent.Add(1)
}

// flush writes out; requests a failed write did not take whole were never
// sent: they wait for no answer.
func (c *sigClient) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	n, err := c.nc.Write(c.out)
	if err != nil {
		for _, s := range c.outEnds {
			if s.end > n {
				delete(c.pending, s.stamp)
			}
		}
	}
	c.out, c.outEnds = c.out[:0], c.outEnds[:0]
	return err
}

func (c *sigClient) run(r *sigRun) {
	defer c.nc.Close()
	for range sigWindow {
		c.shake(r)
	}
	writeErr := c.flush()
	for {
		f, err := c.nextFrame()
		if err != nil {
			if c.errCode == 0 {
				c.end = fmt.Errorf("read: %w (write: %v)", err, writeErr)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				c.end = err // a reset after ERROR is the server closing with our last requests unread
			}
			return
		}
		if c.errCode != 0 {
			c.end = fmt.Errorf("%v after ERROR %d", f.Type, c.errCode)
			return
		}
		switch f.Type {
		case proto.Error:
			c.errCode = f.ErrorCode()
			continue // read on: the close must follow
		case proto.Envelope:
			env, _, total, shares := f.Envelope()
			c.pushes[env] = push{total, shares}
			c.next++
			c.pending[c.next] = true
			c.out = proto.AppendOpenID(c.out, c.next, env, c.reqID(c.next))
			if c.idSec != 0 {
				c.openEnvs[c.next] = env
			}
			c.outEnds = append(c.outEnds, sent{c.next, len(c.out)})
		case proto.ShakeResult, proto.OpenResult:
			if !c.pending[f.Stamp] || (f.Type == proto.ShakeResult) != (f.Stamp >= sigStamp0) {
				c.protoErr = fmt.Errorf("%v with stamp %d answers nothing sent", f.Type, f.Stamp)
				continue
			}
			delete(c.pending, f.Stamp)
			if at := r.sigAt.Load(); at != 0 && time.Now().UnixNano() > at {
				r.afterSig.Add(1)
			}
			if f.Type == proto.OpenResult {
				st, env, amount := f.OpenResult()
				c.opens = append(c.opens, result{st, env, amount})
				break
			}
			st, env, amount := f.ShakeResult()
			c.shakes = append(c.shakes, result{st, env, amount})
			r.answered.Add(1)
			c.shake(r)
		default:
			c.protoErr = fmt.Errorf("unexpected %v", f.Type)
		}
		if writeErr == nil {
			writeErr = c.flush()
		} else { // the server is closing: send nothing more, read its last answers
			for _, s := range c.outEnds {
				delete(c.pending, s.stamp)
			}
			c.out, c.outEnds = c.out[:0], c.outEnds[:0]
		}
	}
}

// buildServer builds this package into a temporary directory, with the race
// detector when the test runs under it, so the server's shutdown path is
// checked for races too.
func buildServer(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if p, err := exec.LookPath("go"); err == nil {
		gobin = p
	}
	bin := filepath.Join(t.TempDir(), "server")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(gobin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return bin
}

// sigServer is the server process.
type sigServer struct {
	cmd           *exec.Cmd
	listen, admin string
	done          chan struct{} // closed when the process has exited and its log is read

	mu  sync.Mutex
	log bytes.Buffer
}

// startServer starts bin on loopback ports of the kernel's choice and waits
// for its "serving" line. The process is killed when the test ends.
func startServer(t *testing.T, bin string, args ...string) *sigServer {
	t.Helper()
	if !slices.Contains(args, "-data") {
		args = append(args, "-data", t.TempDir())
	}
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-log-format", "json"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sigServer{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(s.kill)
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Bytes()
			s.mu.Lock()
			s.log.Write(line)
			s.log.WriteByte('\n')
			s.mu.Unlock()
			if found {
				continue
			}
			var sv struct {
				Msg    string
				Admin  string
				Listen []struct {
					IP   string
					Port int
				}
			}
			if json.Unmarshal(line, &sv) == nil && sv.Msg == "serving" && len(sv.Listen) > 0 {
				found = true
				s.listen = net.JoinHostPort(sv.Listen[0].IP, strconv.Itoa(sv.Listen[0].Port))
				s.admin = sv.Admin
				ready <- nil
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
		if !found {
			ready <- errors.New("server exited before serving")
		}
		close(s.done)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v; log:\n%s", err, s.logText())
		}
	case <-time.After(sigStart):
		s.kill()
		t.Fatalf("server not serving after %v; log:\n%s", sigStart, s.logText())
	}
	return s
}

func (s *sigServer) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

func (s *sigServer) logBytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.log.Bytes())
}

func (s *sigServer) logText() string { return string(s.logBytes()) }

func (s *sigServer) post(path string) error {
	resp, err := http.Post("http://"+s.admin+path, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, body)
	}
	return nil
}

// finalLedger parses the ledger of the server's last log line, "stopped".
func (s *sigServer) finalLedger() (server.Stats, error) {
	var last struct {
		Msg    string       `json:"msg"`
		Ledger server.Stats `json:"ledger"`
	}
	lines := bytes.Split(bytes.TrimSpace(s.logBytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil || last.Msg != "stopped" {
		return last.Ledger, fmt.Errorf("the server's last log line is not \"stopped\" with the ledger: %s", lines[len(lines)-1])
	}
	return last.Ledger, nil
}
