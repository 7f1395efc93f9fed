package server_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// The steady-load fixture of the hostile tests: an in-process server with an
// auth secret serving well-behaved users driven by the load client as a
// library, while an attack runs beside them. Each phase is one
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
