package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hongbao/loadclient"
	"hongbao/proto"
	"hongbao/server"
)

// The steady-load fixture of the hostile tests (issue #7): an in-process
// server with an auth secret serving well-behaved users driven by the load
// client as a library, while an attack runs beside them. Each phase is one
// loadclient.Run: the attack starts once the run's SHAKEs reach the server,
// and the run is stopped when the attack is over (and no sooner than a
// minimum window), so its report's latencies are those of the users under
// that attack. Between phases nothing is connected: goroutines, descriptors
// and the ledger are checked then.

// hostileSecret is the auth secret of the hostile tests' servers.
var hostileSecret = []byte("hostile test secret")

// tokenFor mints a LOGIN token for user, valid for an hour.
func tokenFor(user uint32) []byte {
	return proto.MintToken(nil, hostileSecret, user, time.Now().Add(time.Hour).Unix())
}

// steadyLoad is the well-behaved users and what they and the attackers got.
type steadyLoad struct {
	t     *testing.T
	ts    *testServer
	users int // users 1..users are the load client's
	qps   int

	// Money every client read, for the reconciliation with /stats: the load
	// client's reports, summed over the phases, and the attackers' own sums.
	loadShake, loadOpen uint64
	attShake, attOpen   atomic.Uint64

	campaigns []int // ids to wait for before a ledger check

	base    resources // after the baseline phase, nothing connected
	baseP99 time.Duration
}

// newSteadyLoad starts a server for the hostile tests: 4 SETs, an auth
// secret, and edit's changes.
func newSteadyLoad(t *testing.T, users, qps int, edit func(o *server.Options)) *steadyLoad {
	ts := startServer(t, func(o *server.Options) {
		o.AuthSecret = string(hostileSecret)
		o.Ring = server.DefaultRing // startServer's tiny rings would refuse the users for a burst of LOGINs
		if edit != nil {
			edit(o)
		}
	})
	return &steadyLoad{t: t, ts: ts, users: users, qps: qps}
}

// phaseResult is what the well-behaved users measured during one phase.
type phaseResult struct {
	name     string
	p99      time.Duration // SHAKE, from each SHAKE's scheduled send time
	openP99  time.Duration
	took     time.Duration // the attack
	loadTook time.Duration // the load run, from its start to its report
}

// phase runs one load-client run with attack beside it, checks that the
// well-behaved users saw no error and every request answered, and returns
// their latencies. The run lasts at least minLoad after the attack starts.
// attack runs on the test's goroutine and may fail the test.
func (l *steadyLoad) phase(name string, minLoad time.Duration, attack func()) phaseResult {
	t := l.t
	t.Helper()
	cfg, err := loadclient.ParseFlags(flag.NewFlagSet("loadclient", flag.ContinueOnError), []string{
		"-server", l.ts.addr, "-users", fmt.Sprintf("1-%d", l.users), "-qps", strconv.Itoa(l.qps),
		"-duration", "10m", "-loops", "1", "-auth-secret", string(hostileSecret),
		"-send-rate", "5", "-send-recipients", "3", "-chat-rate", "5", "-grace", "10s", "-quiet"})
	if err != nil {
		t.Fatalf("loadclient.ParseFlags: %v", err)
	}
	before := l.ts.Stats()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		r   *loadclient.Report
		err error
	}
	var out strings.Builder
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := loadclient.Run(ctx, cfg, &out)
		done <- result{r, err}
	}()
	// The attack starts once every user is up and the schedule has begun:
	// SHAKEs are reaching the server.
	waitFor(t, name+": the load running", func() bool {
		st := l.ts.Stats()
		return st.Logins-before.Logins >= uint64(l.users) && st.Shake.Requests-before.Shake.Requests >= uint64(l.qps/20)
	})
	// A campaign of each kind per phase, over by the end of the minimum
	// window, so that the phase's ledger check sees them finished.
	dur := max(minLoad-500*time.Millisecond, time.Second)
	rate := 400
	l.campaign("shake", fmt.Sprintf("rate=%d&total=%d&min=1&max=500", rate, rate*int(dur/time.Millisecond)/1000))
	l.campaign("send", fmt.Sprintf("rate=10&total=%d&recipients=3&min=3&max=3000", 10*int(dur/time.Millisecond)/1000))
	attackStart := time.Now()
	attack()
	took := time.Since(attackStart)
	if rest := minLoad - took; rest > 0 {
		time.Sleep(rest)
	}
	cancel()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: loadclient.Run still running 30s after it was stopped", name)
	}
	pr := phaseResult{name: name, took: took, loadTook: time.Since(start)}
	if res.r == nil {
		t.Fatalf("%s: loadclient.Run: %v, no report", name, res.err)
	}
	r := res.r
	shake, open := r.Requests["SHAKE"], r.Requests["OPEN"]
	pr.p99, pr.openP99 = time.Duration(shake.Latency.P99), time.Duration(open.Latency.P99)
	if res.err != nil {
		t.Errorf("%s: the well-behaved users' run failed: %v\n%s", name, res.err, out.String())
	}
	for kind, rr := range r.Requests {
		if rr.Answered != rr.Sent || rr.Lost != 0 || rr.Unanswered != 0 {
			t.Errorf("%s: well-behaved %s: sent %d, answered %d, lost %d, unanswered %d; want every one answered",
				name, kind, rr.Sent, rr.Answered, rr.Lost, rr.Unanswered)
		}
	}
	if shake.Answered == 0 {
		t.Errorf("%s: no SHAKE answered during the phase", name)
	}
	l.loadShake += r.ShakeAmount
	l.loadOpen += r.OpenAmount
	t.Logf("%s: attack %v, load %v: %d SHAKEs answered (%v), p99 %v (OPEN p99 %v), %d overloaded",
		name, took.Round(time.Millisecond), pr.loadTook.Round(time.Millisecond), shake.Answered,
		statusString(shake.Status), pr.p99, pr.openP99, r.Errors["overload"])
	return pr
}

func statusString(m map[string]uint64) string {
	var b []string
	for s := range 6 {
		if n := m[strconv.Itoa(s)]; n > 0 {
			b = append(b, fmt.Sprintf("%d:%d", s, n))
		}
	}
	return "status " + strings.Join(b, " ")
}

// campaign starts an admin campaign and remembers it for the ledger check.
func (l *steadyLoad) campaign(kind, query string) {
	l.t.Helper()
	l.campaigns = append(l.campaigns, l.ts.startCampaign(kind, query).ID)
}

// p99Floor is the least baseline p99 the 2× rule is applied to. This
// machine has two cores, shared by the server, the load client, the
// attacker and whatever else runs on it: phases with no attack at all
// measured a p99 of 4 to 11 ms there (most of it the schedulers'), so 2× a
// 4 ms baseline would judge the machine, not the attack. Below the floor
// the floor is the baseline.
const p99Floor = 10 * time.Millisecond

// p99Limit is the most a phase's p99 may be: 2× the baseline, floored.
func (l *steadyLoad) p99Limit() time.Duration { return 2 * max(l.baseP99, p99Floor) }

// checkP99 requires the phase's p99 to be within 2× the baseline's (floored
// at p99Floor). Under -race the ratio says nothing about the server (the
// detector's cost, paid by attacker, server and load client alike on two
// cores, dominates), so it is only logged.
func (l *steadyLoad) checkP99(pr phaseResult) {
	l.t.Helper()
	if limit := l.p99Limit(); pr.p99 > limit {
		if raceEnabled {
			l.t.Logf("%s: p99 %v above 2× max(baseline %v, %v) = %v (not judged under -race)", pr.name, pr.p99, l.baseP99, p99Floor, limit)
			return
		}
		l.t.Errorf("%s: well-behaved SHAKE p99 %v; want at most 2× max(baseline %v, %v) = %v (load average %s)",
			pr.name, pr.p99, l.baseP99, p99Floor, limit, loadAverage())
	}
}

// loadAverage is the machine's, for failure messages: others' work shows
// in the latencies too.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// resources is what a leak would leave behind.
type resources struct {
	goroutines int
	fds        int
}

func (r resources) String() string { return fmt.Sprintf("%d goroutines, %d fds", r.goroutines, r.fds) }

// countFDs counts this process's open file descriptors.
func countFDs(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors: %v", err)
	}
	return len(es)
}

func measure(t testing.TB) resources {
	return resources{goroutines: runtime.NumGoroutine(), fds: countFDs(t)}
}

// leakSlack is what may differ from the baseline without being a leak: the
// admin client's keep-alive connection (its two goroutines and descriptor,
// and the server's goroutine and descriptor for it) comes and goes.
const leakSlack = 3

// settle waits until nothing is connected, the campaigns are done and the
// ledger balances, and returns the resources then.
func (l *steadyLoad) settle(what string) resources {
	t := l.t
	t.Helper()
	waitFor(t, what+": every connection released", func() bool { return l.ts.Stats().Connections == 0 })
	for _, id := range l.campaigns {
		l.ts.waitCampaign(id)
	}
	l.campaigns = nil
	waitFor(t, what+": the ledger to settle", func() bool {
		st := l.ts.Stats()
		s, e := st.Shake, st.Envelopes
		return s.CreatedAmount == s.GotAmount+s.PoolAmount && s.Created == s.Got+s.Pool &&
			e.CreatedAmount == e.OpenedAmount+e.OutstandingAmount
	})
	l.ts.hc.CloseIdleConnections()
	return measure(t)
}

// check verifies, after a phase, that nothing leaked and the ledger is
// exact: balanced, and equal to what the clients read.
func (l *steadyLoad) check(what string) {
	t := l.t
	t.Helper()
	l.settle(what)
	var now resources
	deadline := time.Now().Add(waitTime)
	for {
		now = measure(t)
		if now.goroutines <= l.base.goroutines+leakSlack && now.fds <= l.base.fds+leakSlack {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v, baseline %v: leaked\n%s", what, now, l.base, goroutineDump())
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := l.ts.stats()
	checkShakeLedger(t, st)
	checkEnvelopeLedger(t, st)
	shake, open := l.loadShake+l.attShake.Load(), l.loadOpen+l.attOpen.Load()
	if st.Shake.GotAmount != shake || st.Envelopes.OpenedAmount != open {
		t.Errorf("%s: server got_amount %d, opened_amount %d; the clients read %d (load %d + attackers %d) and %d (load %d + attackers %d)",
			what, st.Shake.GotAmount, st.Envelopes.OpenedAmount, shake, l.loadShake, l.attShake.Load(),
			open, l.loadOpen, l.attOpen.Load())
	}
	t.Logf("%s: after: %v (baseline %v); ledger exact: got_amount %d, opened_amount %d, created %d + %d fen",
		what, now, l.base, st.Shake.GotAmount, st.Envelopes.OpenedAmount, st.Shake.CreatedAmount, st.Envelopes.CreatedAmount)
}

// ---- attackers ----
//
// An attack runs in a process of its own: this test binary started again
// with only TestHostileAttacker and the attack's name in its environment.
// In the server's process its goroutines would queue in the same Go
// scheduler as the server's loops and stages (a storm's thousands of
// goroutines ahead of every ingress loop woken from epoll_wait), which
// measures the scheduler, not the server; and the server's goroutines and
// descriptors could not be counted apart from the attacker's. The operating
// system shares the two cores between the processes as it would between a
// server and its clients.
//
// The attacker talks to the test on its stdout and stdin, one line each:
// "hostile-sync TAG" waits for the test to do what TAG asks (measure the
// server, say) and answer "ok"; "hostile-money SHAKE OPEN" reports the fen
// its clients read, for the ledger; every other line is its log.

const (
	attackerEnv  = "HONGBAO_ATTACKER" // the attack to run; unset: not an attacker process
	attackSrvEnv = "HONGBAO_ATTACK_SERVER"
	attackAdmEnv = "HONGBAO_ATTACK_ADMIN"
	attackSzEnv  = "HONGBAO_ATTACK_SIZES"
	syncLine     = "hostile-sync "
	moneyLine    = "hostile-money "
)

// attacker is what an attack works with, in the attacker process.
type attacker struct {
	t           *testing.T
	ts          *testServer // addr and admin only: the server is in the test's process
	sz          hostileSizes
	shake, open atomic.Uint64 // fen its clients read
	in          *bufio.Reader
}

// sync waits until the test has done what tag asks.
func (a *attacker) sync(tag string) {
	a.t.Helper()
	fmt.Printf("%s%s\n", syncLine, tag)
	if line, err := a.in.ReadString('\n'); err != nil || line != "ok\n" {
		a.t.Fatalf("sync %q: read %q, %v; want ok", tag, line, err)
	}
}

// TestHostileAttacker is the attacker process of TestHostileUnderLoad; run
// by itself, it skips.
func TestHostileAttacker(t *testing.T) {
	name := os.Getenv(attackerEnv)
	if name == "" {
		t.Skip("the attacker process of TestHostileUnderLoad")
	}
	a := &attacker{t: t, in: bufio.NewReader(os.Stdin),
		ts: &testServer{t: t, addr: os.Getenv(attackSrvEnv), admin: os.Getenv(attackAdmEnv), hc: &http.Client{Timeout: waitTime}}}
	if err := json.Unmarshal([]byte(os.Getenv(attackSzEnv)), &a.sz); err != nil {
		t.Fatalf("$%s: %v", attackSzEnv, err)
	}
	attack, ok := attacks[name]
	if !ok {
		t.Fatalf("no attack %q", name)
	}
	attack(a)
	fmt.Printf("%s%d %d\n", moneyLine, a.shake.Load(), a.open.Load())
}

// attack runs the attack name in an attacker process and waits for it.
func (l *steadyLoad) attack(name string, sz hostileSizes) {
	t := l.t
	t.Helper()
	var hook func(string)
	if h := attackHooks[name]; h != nil {
		hook = h(l, sz)
	}
	szs, _ := json.Marshal(sz)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostileAttacker$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), attackerEnv+"="+name, attackSrvEnv+"="+l.ts.addr, attackAdmEnv+"="+l.ts.admin,
		attackSzEnv+"="+string(szs))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the attacker: %v", err)
	}
	var log []string
	money := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, syncLine):
			if hook != nil {
				hook(strings.TrimPrefix(line, syncLine))
			}
			io.WriteString(stdin, "ok\n")
		case strings.HasPrefix(line, moneyLine):
			var shake, open uint64
			if _, err := fmt.Sscan(strings.TrimPrefix(line, moneyLine), &shake, &open); err != nil {
				t.Errorf("attacker %s: %q: %v", name, line, err)
			}
			l.attShake.Add(shake)
			l.attOpen.Add(open)
			money = true
		case strings.HasPrefix(line, "    "): // its t.Log lines
			log = append(log, strings.TrimSpace(line))
		}
	}
	stdin.Close()
	err = cmd.Wait()
	for _, line := range log {
		t.Logf("attacker %s: %s", name, line)
	}
	if err != nil || !money {
		t.Errorf("attacker %s: %v (money reported: %v)\n%s", name, err, money, stderr.String())
	}
}

// attackDial connects to ts.
func attackDial(ts *testServer) (*loadclient.Conn, error) {
	return loadclient.Dial(ts.addr, waitTime)
}

// attackLogin connects and logs in as user with a good token.
func attackLogin(ts *testServer, user uint32) (*loadclient.Conn, error) {
	c, err := attackDial(ts)
	if err != nil {
		return nil, err
	}
	c.SetWriteDeadline(time.Now().Add(waitTime))
	if st, err := c.Login(user, tokenFor(user), waitTime); err != nil || st != proto.LoginOK {
		c.Close()
		return nil, fmt.Errorf("LOGIN user %d: status %d, %v", user, st, err)
	}
	return c, nil
}

// expectErrorClose reads until ERROR code, skipping frames skip allows, then
// requires the close.
func expectErrorClose(c *loadclient.Conn, code uint8, skip func(proto.Frame) bool) error {
	for {
		f, err := c.Next(waitTime)
		if err != nil {
			return fmt.Errorf("waiting for ERROR %d: %w", code, err)
		}
		if skip != nil && skip(f) {
			continue
		}
		if f.Type != proto.Error || f.ErrorCode() != code {
			return fmt.Errorf("got %s; want ERROR %d", describe(f), code)
		}
		return expectEOF(c)
	}
}

// expectEOF requires the server to close c with no further frame.
func expectEOF(c *loadclient.Conn) error {
	f, err := c.Next(waitTime)
	switch {
	case err == nil:
		return fmt.Errorf("got %s; want the close", describe(f))
	case !isClosed(err):
		return fmt.Errorf("%w; want EOF or a reset", err)
	}
	return nil
}

// reset closes c with a TCP reset: SO_LINGER 0, then close.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// swarm runs fn(i) for i in [0, n) on at most workers goroutines and
// returns how many failed and the first few errors.
func swarm(n, workers int, fn func(i int) error) (failed int, err error) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if e := fn(i); e != nil {
					mu.Lock()
					failed++
					if len(errs) < 3 {
						errs = append(errs, fmt.Errorf("#%d: %w", i, e))
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return failed, errors.Join(errs...)
}

// drainAll reads c to its end and returns its frames and how it ended.
func drainAll(c *loadclient.Conn) ([]proto.Frame, error) {
	var fs []proto.Frame
	for {
		f, err := c.Next(waitTime)
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}
