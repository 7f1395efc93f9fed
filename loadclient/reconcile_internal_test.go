package loadclient

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// stats builds the part of /stats the reconciliation reads, both invariants holding.
func stats(got, gotAmount, opened, openedAmount int64) *serverStats {
	st := &serverStats{}
	st.Shake.Got, st.Shake.GotAmount = &got, &gotAmount
	st.Shake.CreatedAmount, st.Shake.PoolAmount = gotAmount+7, 7
	st.Envelopes.Opened, st.Envelopes.OpenedAmount = &opened, &openedAmount
	st.Envelopes.CreatedAmount, st.Envelopes.OutstandingAmount = openedAmount+11, 11
	return st
}

// TestChecksOverTheChange checks the arithmetic of both modes: the server's figures are taken
// as after − before, the client's as they are; the shares learned by a repeated OPEN are
// told like OPEN 0s, and OPENs answered 5 or lost with their connection, sent again, are not
// owed anything of their own; pushes that came once the client stopped opening, or while
// their envelope's open was under way, are not owed an OPEN, nor are opens unresolved at the
// end; the invariants are those of the figures after.
func TestChecksOverTheChange(t *testing.T) {
	before, after := stats(1000, 50_000, 40, 4_000), stats(1012, 50_345, 45, 4_210)
	var c counters
	c.ShakeAmount, c.Status[reqShake][1] = 345, 12
	c.OpenAmount, c.Status[reqOpen][0], c.Learned, c.LearnedAmount = 210, 3, 2, 30
	c.Status[reqOpen][5], c.Lost[reqOpen], c.Resent = 7, 3, 10
	c.Pushes[pushEnvelope], c.Unopened, c.Repeated, c.OpenPending = 12, 4, 2, 1
	c.Sent[reqSend], c.Status[reqSend][0] = 3, 3

	want := map[string][2]int64{ // figure → want, got
		"shake.got_amount": {345, 345}, "shake.got": {12, 12},
		"envelopes.opened_amount": {210, 210}, "envelopes.opened": {5, 5},
		"ENVELOPE pushes opened ok": {5, 5}, "SEND acknowledged ok": {3, 3},
	}
	checks := strictChecks(before.figures(), after.figures(), &c)
	if len(checks) != len(want) {
		t.Fatalf("strict: %d checks %+v; want %d", len(checks), checks, len(want))
	}
	for _, ch := range checks {
		if w, ok := want[ch.Figure]; !ok || ch.Want != w[0] || ch.Got != w[1] || !ch.ok() {
			t.Errorf("strict %+v; want want %d, got %d, ok", ch, w[0], w[1])
		}
	}

	c.OpenAmount++ // one fen the server never counted
	for _, ch := range strictChecks(before.figures(), after.figures(), &c) {
		if bad := ch.Figure == "envelopes.opened_amount"; ch.ok() == bad || bad && ch.Diff != 1 {
			t.Errorf("strict with 1 fen more told: %+v", ch)
		}
	}

	c.OpenAmount -= 11 // at-least: 10 fen counted, never told
	checks = atLeastChecks(before.figures(), after, &c)
	if len(checks) != 6 {
		t.Fatalf("at-least: %d checks %+v; want 4 figures and 2 invariants", len(checks), checks)
	}
	for _, ch := range checks {
		switch {
		case !ch.ok():
			t.Errorf("at-least %+v; want ok", ch)
		case ch.Figure == "envelopes.opened_amount" && (ch.Want != 210 || ch.Diff != -10):
			t.Errorf("at-least %+v; want the change 210, 10 fen never told", ch)
		case ch.Figure == "shake.got_amount + pool_amount" && ch.Want != 50_352:
			t.Errorf("at-least %+v; want the invariant of the figures after", ch)
		}
	}
	c.ShakeAmount = 346 // told more than the change counted
	for _, ch := range atLeastChecks(before.figures(), after, &c) {
		if ch.Figure == "shake.got_amount" && ch.ok() {
			t.Errorf("at-least %+v; want a failure: 1 fen told beyond the change", ch)
		}
	}

	r := &ReconcileReport{Endpoint: pathStats, Baseline: before.figures(), After: after.figures(), Checks: checks}
	r.verdict()
	if s := r.Summary(); !r.OK || !strings.HasPrefix(s, "reconcile (/stats, change since the baseline): ok") {
		t.Errorf("summary %q; want ok, naming the endpoint and the change", s)
	}

	// Unresolved at the end: a share drawn and never told is a mismatch that says why.
	c.ShakeAmount, c.OpenAmount = 345, 200
	r = &ReconcileReport{Endpoint: pathStats, Baseline: before.figures(), After: after.figures(), OpenUnresolved: 1,
		Checks: strictChecks(before.figures(), after.figures(), &c)}
	r.verdict()
	if s := r.Summary(); r.OK || !strings.Contains(s, "envelopes.opened_amount: want 210 (server), got 200") ||
		!strings.HasSuffix(s, "; 1 opens without a final answer after the grace: each may hold a share drawn and never told") {
		t.Errorf("summary %q; want the mismatch and the open unresolved named", s)
	}
}

// TestBaselineMissingGateways checks that a gateway missing from the baseline's sums fails the
// reconciliation though every gateway answered after the run: its money during the run
// would count as the run's.
func TestBaselineMissingGateways(t *testing.T) {
	before, after := stats(0, 0, 0, 0), stats(0, 0, 0, 0)
	two, three := 2, 3
	before.Gateways, before.Missing = &two, []int{3}
	after.Gateways = &three
	r := &ReconcileReport{Endpoint: pathClusterStats, Baseline: before.figures(), After: after.figures()}
	r.Checks = strictChecks(r.Baseline, r.After, &counters{})
	r.verdict()
	if r.OK || !strings.Contains(r.Err, "gateway nodes [3] did not answer /cluster/stats before the run") {
		t.Errorf("reconcile %+v; want a failure naming node 3 missing from the baseline", r)
	}
}

// TestAdminInTurn checks that a read goes to the first -admin URL that answers: one that
// refuses or answers 5xx gives way to the next, a 4xx is an answer, and when none answers
// the error names each.
func TestAdminInTurn(t *testing.T) {
	serve := func(status int, body string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	gone := serve(http.StatusOK, "")
	gone.Close()
	busy, missing, ok := serve(http.StatusServiceUnavailable, "busy"), serve(http.StatusNotFound, "no"), serve(http.StatusOK, "yes")
	host := strings.TrimPrefix(ok.URL, "http://") // a bare host:port is http
	for _, tc := range []struct {
		admin  string
		status int
		from   string
	}{
		{gone.URL + "," + busy.URL + ", " + host, http.StatusOK, ok.URL},
		{missing.URL + "," + ok.URL, http.StatusNotFound, missing.URL},
		{gone.URL + "," + busy.URL, http.StatusServiceUnavailable, busy.URL},
	} {
		status, _, from, err := adminGet(&Config{Admin: tc.admin}, "/stats")
		if err != nil || status != tc.status || from != tc.from {
			t.Errorf("-admin %s: %d from %s, %v; want %d from %s", tc.admin, status, from, err, tc.status, tc.from)
		}
	}
	_, _, _, err := adminGet(&Config{Admin: busy.URL + "," + gone.URL}, "/stats")
	if err == nil || !strings.Contains(err.Error(), busy.URL+"/stats answered 503") || !strings.Contains(err.Error(), strings.TrimPrefix(gone.URL, "http://")) {
		t.Errorf("none answering: %v; want an error naming both", err)
	}
}
