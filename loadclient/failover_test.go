//go:build linux

package loadclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
)

// started is a run going on in the background.
type started struct {
	done chan struct{}
	r    *loadclient.Report
	err  error
	out  strings.Builder
}

// startRun runs cfg in the background, for a test that acts on the servers during the run.
func startRun(cfg *loadclient.Config) *started {
	s := &started{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.r, s.err = loadclient.Run(context.Background(), cfg, &s.out)
	}()
	return s
}

// wait returns the run's report, failing the test if it is not over within limit.
func (s *started) wait(t *testing.T, limit time.Duration) (*loadclient.Report, error) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(limit):
		t.Fatalf("Run still running after %v", limit)
	}
	t.Logf("output:\n%s", s.out.String())
	if s.r == nil {
		t.Fatalf("Run: no report: %v", s.err)
	}
	return s.r, s.err
}

// waitUntil polls cond until it holds, failing the test at the deadline.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// checkAccounts checks that every request the client sent is answered, lost with its
// connection, in flight at ERROR 9 (moved: not carried out) or unanswered at the end, once
// only, and that nothing broke the protocol
// (an answer to a request not in flight on its connection would) or timed out.
func checkAccounts(t *testing.T, r *loadclient.Report) {
	t.Helper()
	for kind, rr := range r.Requests {
		if rr.Answered+rr.Lost+rr.NotDone+rr.Unanswered != rr.Sent {
			t.Errorf("%s: %d answered + %d lost + %d moved + %d unanswered; want the %d sent", kind, rr.Answered, rr.Lost, rr.NotDone, rr.Unanswered, rr.Sent)
		}
	}
	if r.Errors["protocol"] != 0 || r.Errors["timeout"] != 0 {
		t.Errorf("errors %v; want no protocol error (no answer twice, none to nothing asked) and no timeout", r.Errors)
	}
}

// TestFailoverMoved: gateway A hands all its users to B mid-run, as when its SETs fail over:
// each connection gets ERROR 9 and closes, and A answers LOGINs with LOGIN_ACK 3 naming B.
// Every user must follow, once: moved, reconnected to A, redirected to B, logged in there and
// served, with the outage measured, what was in flight counted lost, and the at-least
// reconciliation over both gateways passing.
func TestFailoverMoved(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	a, b := newFakeServer(t, 4), newFakeServer(t, 4)
	cluster := fakeCluster(t, []*fakeServer{a, b})
	const users = 20
	cfg := config(t, "-server", a.addr(), "-users", "1-20", "-qps", "200", "-duration", "5s", "-loops", "2",
		"-admin", cluster.URL, "-reconcile", "at-least")
	run := startRun(cfg)
	waitUntil(t, "every user SHAKEs at A", 10*time.Second, func() bool { return a.shook(1, users) == users })
	a.move(b.addr())
	waitUntil(t, "every user SHAKEs at B", 10*time.Second, func() bool { return b.shook(1, users) == users })
	r, err := run.wait(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v; want a pass: moves are resets, forgiven with -reconcile at-least", err)
	}
	checkAccounts(t, r)
	if r.Moved != users || r.Outages != users || r.Reconnects != users || r.Redirected != users {
		t.Errorf("moved %d, outages %d, reconnects %d, redirected %d; want %d of each", r.Moved, r.Outages, r.Reconnects, r.Redirected, users)
	}
	// The backoff before the reconnect is at least 75 ms (100 ms − 25 %).
	if r.OutageMaxS < 0.075 || r.OutageMaxS > cfg.Duration.Seconds() {
		t.Errorf("longest outage %.3f s; want at least the backoff's 0.075 s and within the run", r.OutageMaxS)
	}
	if r.Errors["reset"] != users || r.Errors["connect"] != 0 || r.ConnectFailures.Total != 0 {
		t.Errorf("errors %v, connect failures %+v; want a reset per move and nothing else", r.Errors, r.ConnectFailures)
	}
	if login := r.Requests["LOGIN"].Status; login["0"] != 2*users || login["3"] != users {
		t.Errorf("LOGIN statuses %v; want 0:%d 3:%d", login, 2*users, users)
	}
	a.mu.Lock()
	b.mu.Lock()
	for u := uint32(1); u <= users; u++ {
		if a.loggedIn[u] != 1 || b.loggedIn[u] != 1 || a.redirected[u] != 1 || b.redirected[u] != 0 {
			t.Errorf("user %d: logged in %d times at A, %d at B, redirected %d times by A, %d by B; want once each at A and B, redirected once by A",
				u, a.loggedIn[u], b.loggedIn[u], a.redirected[u], b.redirected[u])
		}
	}
	counted, moved := a.shakes+b.shakes, a.moved
	b.mu.Unlock()
	a.mu.Unlock()
	if moved != users {
		t.Errorf("A sent ERROR 9 %d times; want %d", moved, users)
	}
	if shake := r.Requests["SHAKE"]; int64(shake.Status["1"]) > counted {
		t.Errorf("told of %d SHAKEs that got an envelope; the gateways answered %d", shake.Status["1"], counted)
	}
	rec := r.Reconcile
	if rec == nil || !rec.OK || rec.Mode != loadclient.ReconcileAtLeast || rec.Endpoint != "/cluster/stats" || rec.Gateways != 2 {
		t.Errorf("reconcile %+v; want ok, at-least, from /cluster/stats over 2 gateways", rec)
	}
	var summary strings.Builder
	r.WriteSummary(&summary)
	if want := fmt.Sprintf("reconnects: %d of %d connections that failed (%d moved: ERROR 9), 0 not back by the end", users, users, users); !strings.Contains(summary.String(), want) {
		t.Errorf("summary does not say %q:\n%s", want, summary.String())
	}
	doc, _ := json.Marshal(r)
	for _, want := range []string{`"moved":20`, `"reconnects":20`, `"outages":20`, `"redirected":20`, `"outage_max_s":`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("JSON report lacks %s: %s", want, doc)
		}
	}
}

// TestFailoverKilled: -server names A, an address nobody listens on, and B; A is killed
// mid-run (listener and connections closed) with its admin API. A's users must go on to the
// next address, be refused there, and end at B; the users whose own address is the dead one
// must reach B from the start. Every request is accounted for once, and the at-least
// reconciliation reads /cluster/stats from B's admin URL, the second -admin, since A's
// does not answer.
func TestFailoverKilled(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	a, b := newFakeServer(t, 4), newFakeServer(t, 4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	adminA, adminB := fakeCluster(t, []*fakeServer{a, b}), fakeCluster(t, []*fakeServer{a, b})
	const users = 30 // user u starts at -server address (u−1) mod 3: A, dead, B in turn
	cfg := config(t, "-server", a.addr()+","+dead+","+b.addr(), "-users", "1-30", "-qps", "300", "-duration", "5s", "-loops", "2",
		"-admin", adminA.URL+","+adminB.URL, "-reconcile", "at-least", "-send-rate", "10", "-send-recipients", "3")
	atA := func(u uint32) bool { return (u-1)%3 == 0 }
	run := startRun(cfg)
	waitUntil(t, "A's users SHAKE at A, the others at B", 10*time.Second, func() bool {
		return a.shook(1, users) == users/3 && b.shook(1, users) == users-users/3
	})
	a.kill()
	adminA.Close()
	waitUntil(t, "every user SHAKEs at B", 10*time.Second, func() bool { return b.shook(1, users) == users })
	r, err := run.wait(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v; want a pass: refused connects and resets are forgiven with -reconcile at-least", err)
	}
	checkAccounts(t, r)
	const fromA = users / 3
	if r.Outages != fromA || r.Reconnects != fromA || r.Moved != 0 || r.Redirected != 0 {
		t.Errorf("outages %d, reconnects %d, moved %d, redirected %d; want %d, %d, 0, 0", r.Outages, r.Reconnects, r.Moved, r.Redirected, fromA, fromA)
	}
	if r.OutageMaxS < 0.075 || r.OutageMaxS > cfg.Duration.Seconds() {
		t.Errorf("longest outage %.3f s; want at least the backoff's 0.075 s and within the run", r.OutageMaxS)
	}
	// One refusal for each user whose own address is the dead one, and one for each of A's
	// after the kill: none tries A again, nor the dead address twice.
	cf := r.ConnectFailures
	if r.Errors["reset"] != fromA || r.Errors["connect"] != 2*fromA || len(cf.Kinds) != 1 || cf.Kinds[0].Kind != "ECONNREFUSED" ||
		cf.Kinds[0].Count != 2*fromA || cf.Kinds[0].First != "connect "+dead+": connection refused" {
		t.Errorf("errors %v, connect failures %+v; want %d resets and %d refusals, all at %s", r.Errors, cf, fromA, 2*fromA, dead)
	}
	a.mu.Lock()
	b.mu.Lock()
	for u := uint32(1); u <= users; u++ {
		want := 0
		if atA(u) {
			want = 1
		}
		if a.loggedIn[u] != want || b.loggedIn[u] != 1 {
			t.Errorf("user %d: logged in %d times at A and %d at B; want %d and 1", u, a.loggedIn[u], b.loggedIn[u], want)
		}
	}
	counted := a.shakes + b.shakes
	b.mu.Unlock()
	a.mu.Unlock()
	if shake := r.Requests["SHAKE"]; int64(shake.Status["1"]) > counted || shake.Sent == 0 {
		t.Errorf("told of %d SHAKEs that got an envelope of %d sent; the gateways answered %d", shake.Status["1"], shake.Sent, counted)
	}
	rec := r.Reconcile
	if rec == nil || !rec.OK || rec.Endpoint != "/cluster/stats" || rec.Admin != adminB.URL {
		t.Fatalf("reconcile %+v; want ok from /cluster/stats read at %s", rec, adminB.URL)
	}
	if want := "reconcile (/cluster/stats, 2 gateways, from " + adminB.URL + ", change since the baseline) at-least: ok"; !strings.HasPrefix(rec.Summary(), want) {
		t.Errorf("summary %q; want it to start %q", rec.Summary(), want)
	}
}

// TestShakeResentWithItsID: a gateway counts the first SHAKE of 10 users and closes their
// connections before the answer, as a kill after the money was made durable. Each of those
// SHAKEs is sent again after the user's next login, with the same request id, and answered as
// the gateway answered it: the money told is the money counted, exactly (-reconcile strict).
func TestShakeResentWithItsID(t *testing.T) {
	t.Parallel() // it waits on the server and the clock, not on the CPU
	s := newFakeServer(t, 0)
	const drops = 10
	s.mu.Lock()
	s.dropShakes = drops
	s.mu.Unlock()
	cfg := config(t, "-server", s.addr(), "-users", "1-20", "-qps", "200", "-duration", "3s", "-loops", "2",
		"-admin", s.admin.URL, "-reconcile", "strict", "-restarts")
	r, err := startRun(cfg).wait(t, 30*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkAccounts(t, r)
	if r.ShakeResent < drops || r.ShakeUnresolved != 0 {
		t.Errorf("SHAKEs sent again %d, never sent again %d; want at least %d and 0", r.ShakeResent, r.ShakeUnresolved, drops)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayed < drops {
		t.Errorf("%d SHAKEs answered from a kept answer; want at least the %d dropped", s.replayed, drops)
	}
	for u := range s.dropped {
		if ids := s.shakeIDs[u]; len(ids) < 2 || ids[0] != ids[1] || ids[0] == 0 {
			t.Errorf("user %d: request ids %#x; want the dropped SHAKE's id again next", u, ids[:min(3, len(ids))])
		}
	}
	if rec := r.Reconcile; rec == nil || !rec.OK || rec.Mode == loadclient.ReconcileAtLeast {
		t.Errorf("reconcile %+v; want strict and ok: every SHAKE counted was told", rec)
	}
	if told := r.ShakeAmount; int64(told) != s.shakeAmount {
		t.Errorf("told %d fen of SHAKEs; the gateway counted %d", told, s.shakeAmount)
	}
}
