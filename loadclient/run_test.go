//go:build linux

package loadclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/proto"
)

// run runs cfg and fails the test if it takes longer than limit.
func run(t *testing.T, cfg *loadclient.Config, limit time.Duration) (*loadclient.Report, error, time.Duration) {
	t.Helper()
	var out strings.Builder
	type result struct {
		r   *loadclient.Report
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := loadclient.Run(context.Background(), cfg, &out)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		t.Logf("output:\n%s", out.String())
		return res.r, res.err, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("Run still running after %v", limit)
		return nil, nil, 0
	}
}

// TestShakesFollowSchedule checks that the SHAKEs carry the exact global schedule: as many
// stamped in each whole second as -qps, the first second aside (users still connecting skip
// their turn), and every due send either sent or skipped.
func TestShakesFollowSchedule(t *testing.T) {
	fake := newFakeServer(t, 0)
	const qps, secs = 300, 3
	cfg := config(t, "-server", fake.addr(), "-users", "1-60", "-qps", "300", "-duration", "3s", "-loops", "2",
		"-source", "127.0.0.2-127.0.0.3")
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	shake := r.Requests["SHAKE"]
	if got := shake.Sent + r.Skipped; got != qps*secs {
		t.Errorf("got %d SHAKEs sent + %d skipped; want %d due in %ds at %d QPS", shake.Sent, r.Skipped, qps*secs, secs, qps)
	}
	if shake.Answered != shake.Sent || shake.Status["1"] != shake.Sent {
		t.Errorf("got %d SHAKEs answered (%v) of %d sent; want all, status 1", shake.Answered, shake.Status, shake.Sent)
	}
	startSec := r.Start.Unix()
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for s := startSec + 1; s < startSec+secs; s++ {
		if got := fake.byStampSec[s]; got != qps {
			t.Errorf("second %d of the run: got %d SHAKEs stamped in it; want %d", s-startSec, got, qps)
		}
	}
	if fake.peers["127.0.0.2"] != 30 || fake.peers["127.0.0.3"] != 30 {
		t.Errorf("connections by source address: %v; want 30 from each of -source 127.0.0.2-127.0.0.3", fake.peers)
	}
	if int64(shake.Sent) != fake.shakes {
		t.Errorf("server got %d SHAKEs; client sent %d", fake.shakes, shake.Sent)
	}
	if l := shake.Latency; l.Count != shake.Sent || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
		t.Errorf("SHAKE latency %+v: want %d values with 0 < p50 ≤ p99 ≤ max", l, shake.Sent)
	}
}

// TestEveryEnvelopeOpenedOnce checks that every ENVELOPE pushed, from SHAKEs and from SENDs,
// is opened exactly once, and that the reconciliation against an honest server passes.
func TestEveryEnvelopeOpenedOnce(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 5)
	history := filepath.Join(t.TempDir(), "history.csv")
	cfg := config(t, "-server", fake.addr(), "-users", "1-40", "-qps", "200", "-duration", "2s",
		"-send-rate", "20", "-send-recipients", "3", "-chat-rate", "20", "-chat-size", "100",
		"-admin", fake.admin.URL, "-history", history)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The history holds every money answer told: its amounts add up to
	// what the report says was told.
	b, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if lines[0]+"\n" != loadclient.HistoryHeader {
		t.Fatalf("history header %q", lines[0])
	}
	var shake, open uint64
	for _, l := range lines[1:] {
		fs := strings.Split(l, ",")
		amount, err := strconv.ParseUint(fs[len(fs)-1], 10, 32)
		if len(fs) != 6 || err != nil {
			t.Fatalf("history line %q", l)
		}
		if fs[1] == "shake" {
			shake += amount
		} else {
			open += amount
		}
	}
	if shake != r.ShakeAmount || open != r.OpenAmount || shake == 0 || open == 0 {
		t.Errorf("history: %d fen SHAKE, %d OPEN; the report told %d and %d", shake, open, r.ShakeAmount, r.OpenAmount)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.pushed) == 0 || fake.sends == 0 || fake.chats == 0 {
		t.Fatalf("got %d envelopes pushed, %d SENDs, %d CHATs; want some of each", len(fake.pushed), fake.sends, fake.chats)
	}
	for key, n := range fake.pushed {
		if n != 1 {
			t.Errorf("user %d envelope %d pushed %d times; the fake pushes once", key[0], key[1], n)
		}
		if got := fake.opened[key]; got != 1 {
			t.Errorf("user %d envelope %d: opened %d times; want 1", key[0], key[1], got)
		}
	}
	for key, n := range fake.opened {
		if fake.pushed[key] == 0 {
			t.Errorf("user %d opened envelope %d %d times, never pushed to it", key[0], key[1], n)
		}
	}
	if got, want := r.Pushes["ENVELOPE"], uint64(len(fake.pushed)); got != want {
		t.Errorf("client counted %d ENVELOPE pushes; server pushed %d", got, want)
	}
	if r.Reconcile == nil || !r.Reconcile.OK || r.Reconcile.Endpoint != "/stats" {
		t.Errorf("reconcile: %+v; want ok from /stats (GET /cluster answers 404)", r.Reconcile)
	}
	if send := r.Requests["SEND"]; send.Sent == 0 || send.Status["0"] != send.Sent {
		t.Errorf("SEND: %+v; want every SEND acknowledged ok", send)
	}
	if chat := r.Requests["CHAT"]; chat.Answered != chat.Sent || r.Pushes["CHAT_DELIVER"] != chat.Status["0"] {
		t.Errorf("CHAT: %+v, %d delivered; want every CHAT answered and each handed one delivered", chat, r.Pushes["CHAT_DELIVER"])
	}
}

// TestReconcileMismatch checks that a server under-reporting got_amount by 1 fen fails the
// run with a message naming the figure and the difference.
func TestReconcileMismatch(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	fake.underReport = 1
	cfg := config(t, "-server", fake.addr(), "-users", "1-20", "-qps", "100", "-duration", "1s", "-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatal("Run: got no error; want a reconciliation mismatch")
	}
	for _, want := range []string{"shake.got_amount", "off by +1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "opened_amount") {
		t.Errorf("error %q blames a figure that agrees", err)
	}
	if r == nil || r.Reconcile == nil || r.Reconcile.OK {
		t.Fatalf("report reconcile %+v; want a failed one", r.Reconcile)
	}
}

// TestReconcileSinceBaseline runs against a server that holds money from before the run: the
// strict reconciliation compares the change over the run, the baseline and the figures after it
// are in the report, and the summary says what was compared.
func TestReconcileSinceBaseline(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 5)
	fake.hold(1000, 48_611, 70, 12_345)
	cfg := config(t, "-server", fake.addr(), "-users", "1-20", "-qps", "100", "-duration", "1s",
		"-send-rate", "10", "-send-recipients", "3", "-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec := r.Reconcile
	want := loadclient.Figures{Got: 1000, GotAmount: 48_611, Opened: 70, OpenedAmount: 12_345}
	if rec == nil || rec.Baseline == nil || !reflect.DeepEqual(*rec.Baseline, want) {
		t.Fatalf("reconcile %+v; want the baseline %+v", rec, want)
	}
	f := fake.figures()
	after := loadclient.Figures{Got: f.shakes, GotAmount: f.gotAmount, Opened: f.opened, OpenedAmount: f.openedAmount}
	if rec.After == nil || !reflect.DeepEqual(*rec.After, after) {
		t.Errorf("reconcile after %+v; want the server's %+v", rec.After, after)
	}
	if r.ShakeAmount == 0 || r.OpenAmount == 0 || int64(r.ShakeAmount) != after.GotAmount-want.GotAmount ||
		int64(r.OpenAmount) != after.OpenedAmount-want.OpenedAmount {
		t.Errorf("client got %d + %d fen; want some of each, the server's change %d + %d", r.ShakeAmount, r.OpenAmount,
			after.GotAmount-want.GotAmount, after.OpenedAmount-want.OpenedAmount)
	}
	if !rec.OK || !strings.HasPrefix(rec.Summary(), "reconcile (/stats, change since the baseline): ok") {
		t.Errorf("summary %q; want ok over the change since the baseline", rec.Summary())
	}
	doc, _ := json.Marshal(rec)
	if !strings.Contains(string(doc), `"baseline":{"shake.got":1000,"shake.got_amount":48611,"envelopes.opened":70,"envelopes.opened_amount":12345}`) {
		t.Errorf("JSON report lacks the baseline's values: %s", doc)
	}
}

// TestReconcileSettlesPushes runs against a server that goes on pushing envelopes after the
// run, as a send campaign does: the client stops opening them at the end, so its money and the
// server's stop together, and the strict reconciliation is exact within the grace.
func TestReconcileSettlesPushes(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	fake.campaign(20, 2*time.Millisecond)
	cfg := config(t, "-server", fake.addr(), "-users", "1-20", "-qps", "100", "-duration", "1500ms", "-grace", "5s",
		"-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec := r.Reconcile
	if rec == nil || !rec.OK || len(rec.InFlight) != 0 {
		t.Fatalf("reconcile %+v; want ok, nothing in flight", rec)
	}
	if r.Unopened == 0 || r.Requests["OPEN"].Status["0"] == 0 {
		t.Errorf("%d pushes not opened, OPEN %v; want pushes opened during the run and some after the client stopped",
			r.Unopened, r.Requests["OPEN"].Status)
	}
	// The connections are closed: the server's figure is final, and no OPEN came after the read.
	if f := fake.figures(); f.openedAmount != rec.After.OpenedAmount || uint64(f.openedAmount) != r.OpenAmount {
		t.Errorf("server opened %d fen in all, %d when read; the client was told %d", f.openedAmount, rec.After.OpenedAmount, r.OpenAmount)
	}
}

// TestServerKilledMidRun checks that a server dying makes the run end on time with the
// connection errors counted and a failure, rather than hang.
func TestServerKilledMidRun(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	cfg := config(t, "-server", fake.addr(), "-users", "1-30", "-qps", "200", "-duration", "3s", "-grace", "1s",
		"-admin", fake.admin.URL)
	time.AfterFunc(1500*time.Millisecond, fake.kill)
	r, err, took := run(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatal("Run: got no error; want one after the server died")
	}
	if took > 9*time.Second {
		t.Errorf("Run took %v after a 3s run with a 1s grace; want it bounded", took)
	}
	if r.Errors["reset"] == 0 || r.Errors["connect"] == 0 {
		t.Errorf("errors %v; want resets (the drops) and connect errors (the reconnects)", r.Errors)
	}
	if !strings.Contains(err.Error(), "reset") {
		t.Errorf("error %q does not mention the resets", err)
	}
}

// TestReconcileAtLeast checks -reconcile at-least across a server that cuts every connection
// mid-run, as a restart does: the resets do not fail the run, a server counting more than the
// client was told passes (the difference reported: the 3 fen and the answers the cut lost, not
// the money it held before the run), and one counting less fails it (by far more than the
// lost answers could make up).
func TestReconcileAtLeast(t *testing.T) {
	for _, tc := range []struct {
		under int64 // the fake's got_amount less than it counted
		ok    bool
	}{{-3, true}, {1_000_000, false}} {
		t.Run(fmt.Sprintf("under %d", tc.under), func(t *testing.T) {
			t.Parallel()
			fake := newFakeServer(t, 0)
			fake.underReport = tc.under
			const held = 500_000 // fen from before the run: neither told nor counted in it
			fake.hold(5000, held, 0, 0)
			cfg := config(t, "-server", fake.addr(), "-users", "1-20", "-qps", "200", "-duration", "1500ms", "-grace", "1s",
				"-admin", fake.admin.URL, "-reconcile", "at-least")
			time.AfterFunc(700*time.Millisecond, fake.dropAll)
			r, err, _ := run(t, cfg, 20*time.Second)
			if r == nil || r.Reconcile == nil || r.Reconcile.Mode != loadclient.ReconcileAtLeast {
				t.Fatalf("report %+v; want an at-least reconciliation", r)
			}
			if r.Errors["reset"] == 0 {
				t.Errorf("errors %v; want the resets of the cut connections", r.Errors)
			}
			switch {
			case tc.ok && (err != nil || !r.Reconcile.OK):
				t.Errorf("%v, %s; want ok", err, r.Reconcile.Summary())
			case tc.ok && (r.Reconcile.Checks[0].Diff > -3 || !strings.Contains(r.Reconcile.Summary(), "counted, never told: shake.got_amount +")):
				t.Errorf("%+v, summary %q; want at least the 3 fen counted, never told", r.Reconcile.Checks[0], r.Reconcile.Summary())
			case tc.ok && r.Reconcile.Checks[0].Diff <= -held:
				t.Errorf("%+v; want the %d fen held before the run out of the counted, never told", r.Reconcile.Checks[0], held)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "shake.got_amount: want at most")):
				t.Errorf("error %v; want shake.got_amount named", err)
			}
		})
	}
}

// TestConn drives the fake with the small protocol client.
func TestConn(t *testing.T) {
	fake := newFakeServer(t, 1)
	c, err := wire.Dial(fake.addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.Login(7, nil, time.Second); err != nil || st != proto.LoginOK {
		t.Fatalf("Login: status %d, %v; want 0", st, err)
	}
	c.Send(proto.AppendShake(nil, 42))
	f, err := c.Expect(proto.ShakeResult, time.Second)
	if err != nil || f.Stamp != 42 {
		t.Fatalf("SHAKE: %v %v; want SHAKE_RESULT with stamp 42", f, err)
	}
	f, err = c.Expect(proto.Envelope, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	env, _, _, _ := f.Envelope()
	c.Send(proto.AppendOpen(nil, 43, env))
	f, err = c.Expect(proto.OpenResult, time.Second)
	if st, _, amount := f.OpenResult(); err != nil || st != proto.OpenOK || amount != openAmount {
		t.Fatalf("OPEN: status %d amount %d, %v; want 0 and %d", st, amount, err, openAmount)
	}
}

// TestRateChanges checks a scripted plan and a run-time change on -control: each whole
// second carries exactly the rate in force, and /qps?set takes effect within a second.
func TestRateChanges(t *testing.T) {
	fake := newFakeServer(t, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	control := ln.Addr().String()
	ln.Close()
	cfg := config(t, "-server", fake.addr(), "-users", "1-50", "-phases", "100@2s,200", "-duration", "5s", "-control", control)
	type change struct {
		at   time.Time
		from string
	}
	changed := make(chan change, 1)
	time.AfterFunc(3200*time.Millisecond, func() {
		at := time.Now()
		resp, err := http.Get("http://" + control + "/qps?set=400")
		if err != nil {
			changed <- change{at, err.Error()}
			return
		}
		var body struct{ From string }
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		changed <- change{at, body.From}
	})
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	ch := <-changed
	setAt, boundary := ch.at, ch.from
	from, err := time.Parse(time.RFC3339, boundary)
	if err != nil {
		t.Fatalf("/qps?set answered from=%q: %v", boundary, err)
	}
	if d := from.Sub(setAt); d <= 0 || d > time.Second+rateNotice {
		t.Errorf("rate change at %v takes effect at %v, %v later; want within a second (and the notice)", setAt, from, d)
	}
	start := r.Start.Unix()
	want := map[int64]int{start + 1: 100}
	for s := start + 2; s < start+5; s++ {
		want[s] = 200
		if s >= from.Unix() {
			want[s] = 400
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	for s, n := range want {
		if got := fake.byStampSec[s]; got != n {
			t.Errorf("second %d of the run: got %d SHAKEs; want %d", s-start, got, n)
		}
	}
}

const rateNotice = 50 * time.Millisecond

// TestReconnect checks that users whose connections drop reconnect, log in again and go on
// sending, with the drops counted as resets.
func TestReconnect(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	const users = 20
	cfg := config(t, "-server", fake.addr(), "-users", "1-20", "-qps", "100", "-duration", "3s")
	time.AfterFunc(1200*time.Millisecond, fake.dropAll)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "reset 20") {
		t.Errorf("Run: %v; want a failure naming 20 resets", err)
	}
	if r.Connects != 2*users || r.Requests["LOGIN"].Status["0"] != 2*users {
		t.Errorf("got %d connects, LOGIN %v; want %d of each: every user twice", r.Connects, r.Requests["LOGIN"].Status, 2*users)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if last := fake.byStampSec[r.Start.Unix()+2]; last != 100 {
		t.Errorf("got %d SHAKEs in the last second; want all 100 after the reconnects", last)
	}
}

// TestChurn checks -churn: users close their connections at the rate asked and connect
// again at once, with no error counted, every SHAKE answered and the reconciliation
// (pushes opened included) exact.
func TestChurn(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 4)
	const users, churn, secs = 30, 20, 3
	cfg := config(t, "-server", fake.addr(), "-users", "1-30", "-qps", "300", "-duration", "3s",
		"-churn", "20", "-loops", "2", "-admin", fake.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A churn finds no idle user now and then (8 tries), so allow a few short.
	if r.Churned < churn*secs*3/4 || r.Churned > churn*secs {
		t.Errorf("churned %d connections; want about %d (%d/s for %ds)", r.Churned, churn*secs, churn, secs)
	}
	if r.Connects != users+r.Churned || r.Requests["LOGIN"].Status["0"] != r.Connects {
		t.Errorf("got %d connects, LOGIN %v; want %d users + %d churned, each logged in", r.Connects, r.Requests["LOGIN"].Status, users, r.Churned)
	}
	if shake := r.Requests["SHAKE"]; shake.Sent == 0 || shake.Answered != shake.Sent || shake.Lost != 0 {
		t.Errorf("SHAKE %+v; want every one answered, none lost", shake)
	}
	if r.Pushes["ENVELOPE"] == 0 || r.Reconcile == nil || !r.Reconcile.OK {
		t.Errorf("%d pushes, reconcile %+v; want some pushes and an exact reconciliation", r.Pushes["ENVELOPE"], r.Reconcile)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.logins != int64(r.Connects) {
		t.Errorf("the server saw %d logins; the client made %d connects", fake.logins, r.Connects)
	}
}

// TestRedirect runs against two gateways: A, the -server, answers LOGIN_ACK 3 for odd users
// with the address of B. Every odd user must end logged in at B only, every even one at A,
// each once, with the redirects counted apart from the errors, every SHAKE answered, and the
// reconciliation reading /cluster/stats, the sum over A and B.
func TestRedirect(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	a, b := newFakeServer(t, 4), newFakeServer(t, 4)
	a.mu.Lock()
	a.redirect = func(user uint32) (string, bool) { return b.addr(), user%2 == 1 }
	a.mu.Unlock()
	cluster := fakeCluster(t, []*fakeServer{a, b})
	const users = 30
	cfg := config(t, "-server", a.addr(), "-users", "1-30", "-qps", "200", "-duration", "2s", "-loops", "2",
		"-admin", cluster.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Redirected != users/2 {
		t.Errorf("redirected %d; want %d, one per odd user", r.Redirected, users/2)
	}
	if login := r.Requests["LOGIN"].Status; login["0"] != users || login["3"] != users/2 {
		t.Errorf("LOGIN statuses %v; want 0:%d 3:%d", login, users, users/2)
	}
	if r.Connects != users+users/2 || r.ConnectFailures.Total != 0 {
		t.Errorf("%d connects, connect failures %+v; want %d and none", r.Connects, r.ConnectFailures, users+users/2)
	}
	shake := r.Requests["SHAKE"]
	if shake.Sent == 0 || shake.Answered != shake.Sent || shake.Status["1"] != shake.Sent || shake.Lost != 0 {
		t.Errorf("SHAKE %+v; want every one answered with status 1, none lost", shake)
	}
	a.mu.Lock()
	b.mu.Lock()
	for u := uint32(1); u <= users; u++ {
		at, other, owner := a, b, "A"
		if u%2 == 1 {
			at, other, owner = b, a, "B"
		}
		if at.loggedIn[u] != 1 || other.loggedIn[u] != 0 {
			t.Errorf("user %d logged in %d times at A and %d at B; want once at %s", u, a.loggedIn[u], b.loggedIn[u], owner)
		}
		if want := int(u % 2); a.redirected[u] != want || b.redirected[u] != 0 {
			t.Errorf("user %d redirected %d times by A and %d by B; want %d by A", u, a.redirected[u], b.redirected[u], want)
		}
	}
	if a.shakes == 0 || b.shakes == 0 || a.shakes+b.shakes != int64(shake.Sent) {
		t.Errorf("A got %d SHAKEs, B %d; want both some, %d in all", a.shakes, b.shakes, shake.Sent)
	}
	b.mu.Unlock()
	a.mu.Unlock()
	if rec := r.Reconcile; rec == nil || !rec.OK || rec.Endpoint != "/cluster/stats" || rec.Gateways != 2 {
		t.Errorf("reconcile %+v; want ok from /cluster/stats over 2 gateways", rec)
	}
	var summary strings.Builder
	r.WriteSummary(&summary)
	for _, want := range []string{"15 redirected", "reconcile (/cluster/stats, 2 gateways, change since the baseline): ok"} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary does not say %q:\n%s", want, summary.String())
		}
	}
	doc, _ := json.Marshal(r)
	if !strings.Contains(string(doc), `"redirected":15`) || !strings.Contains(string(doc), `"endpoint":"/cluster/stats"`) {
		t.Errorf("JSON report lacks the redirect count or the endpoint: %s", doc)
	}
}

// TestRedirectOwnerUnknown checks LOGIN_ACK 3 without a usable address: empty (the owner is
// down) or not an ip:port. Each is a connect failure of its own kind, retried at the default
// gateway after the backoff, never a redirect.
func TestRedirectOwnerUnknown(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	a := newFakeServer(t, 0)
	a.mu.Lock()
	a.redirect = func(user uint32) (string, bool) {
		switch user {
		case 2:
			return "", true
		case 3:
			return "gateway-b:7001", true
		}
		return "", false
	}
	a.mu.Unlock()
	cfg := config(t, "-server", a.addr(), "-users", "1-4", "-qps", "20", "-duration", "1s", "-grace", "100ms",
		"-admin", a.admin.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "wrong gateway, owner unknown") {
		t.Fatalf("Run: %v; want a failure naming the unknown owner", err)
	}
	cf := r.ConnectFailures
	if len(cf.Kinds) != 1 || cf.Kinds[0].Kind != "wrong gateway, owner unknown" || cf.Kinds[0].Count < 4 {
		t.Fatalf("connect failures %+v; want only \"wrong gateway, owner unknown\", retried (at least twice per user)", cf)
	}
	if want := "LOGIN redirected by " + a.addr() + ": "; !strings.HasPrefix(cf.Kinds[0].First, want) {
		t.Errorf("first failure %q; want it to start %q", cf.Kinds[0].First, want)
	}
	if r.Redirected != 0 || r.Errors["connect"] != cf.Total {
		t.Errorf("redirected %d, errors %v; want no redirect and %d connect errors", r.Redirected, r.Errors, cf.Total)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loggedIn[1] != 1 || a.loggedIn[4] != 1 || a.redirected[2] < 2 || a.redirected[3] < 2 {
		t.Errorf("logged in %v, redirected %v; want users 1 and 4 logged in once, 2 and 3 asking A again", a.loggedIn, a.redirected)
	}
	if r.Reconcile == nil || !r.Reconcile.OK || r.Reconcile.Endpoint != "/stats" {
		t.Errorf("reconcile %+v; want ok from /stats (GET /cluster answers 404)", r.Reconcile)
	}
}

// TestReconcileClusterMissing checks that /cluster/stats naming gateways that did not answer
// fails the reconciliation, naming them, even when the figures of the others agree.
func TestReconcileClusterMissing(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	a, b := newFakeServer(t, 0), newFakeServer(t, 0)
	cluster := fakeCluster(t, []*fakeServer{a, b, b}, 3)
	cfg := config(t, "-server", a.addr(), "-users", "1-10", "-qps", "50", "-duration", "1s", "-admin", cluster.URL)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "gateway nodes [3] did not answer /cluster/stats") {
		t.Fatalf("Run: %v; want a failure naming node 3", err)
	}
	rec := r.Reconcile
	if rec == nil || rec.OK || rec.Endpoint != "/cluster/stats" || rec.Gateways != 2 || len(rec.Missing) != 1 || rec.Missing[0] != 3 {
		t.Errorf("reconcile %+v; want failed, /cluster/stats, 2 gateways, node 3 missing", rec)
	}
	for _, c := range rec.Checks {
		if c.Diff != 0 {
			t.Errorf("check %+v differs; the gateways that answered hold every figure", c)
		}
	}
}

// TestConnLoginRedirect checks that the small client sees LOGIN_ACK 3 and its address.
func TestConnLoginRedirect(t *testing.T) {
	a := newFakeServer(t, 0)
	a.mu.Lock()
	a.redirect = func(user uint32) (string, bool) { return "127.0.0.1:7001", user == 7 }
	a.mu.Unlock()
	c, err := wire.Dial(a.addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.Login(7, nil, time.Second); err != nil || st != proto.LoginWrongGateway || c.Owner != "127.0.0.1:7001" {
		t.Fatalf("Login: status %d, owner %q, %v; want 3 and 127.0.0.1:7001", st, c.Owner, err)
	}
}
