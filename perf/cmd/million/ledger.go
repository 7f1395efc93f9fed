package main

import (
	"hongbao/perf/internal/harness"
)

// totals are the money and the counts of all servers, or of all load
// clients, added up.
type totals struct {
	ShakeGot, ShakeAmount   int64 // SHAKEs that got an envelope, their fen
	Opened, OpenAmount      int64 // OPENs answered ok (shares opened), their fen
	Created, CreatedAmount  int64 // group envelopes
	Outstanding             int64 // fen not opened
	ShakeCreatedAmount      int64
	Requests                int64 // SHAKEs the servers saw
	Overload, SystemSkipped int64
}

func serverTotals(ss []*serverProc) totals {
	var t totals
	for _, s := range ss {
		t.add(&s.stats)
	}
	return t
}

// add adds one server's /stats to t.
func (t *totals) add(st *harness.Stats) {
	t.ShakeGot += st.Shake.Got
	t.ShakeAmount += st.Shake.GotAmount
	t.Opened += st.Envelopes.Opened
	t.OpenAmount += st.Envelopes.OpenedAmount
	t.Created += st.Envelopes.Created
	t.CreatedAmount += st.Envelopes.CreatedAmount
	t.Outstanding += st.Envelopes.OutstandingAmount
	t.ShakeCreatedAmount += st.Shake.CreatedAmount
	t.Requests += st.Shake.Requests
	t.Overload += st.Shake.Overload + st.Envelopes.Overload
	t.SystemSkipped += st.Envelopes.SystemSkipped
}

func clientTotals(cs []*clientProc) totals {
	var t totals
	for _, c := range cs {
		r := c.rep
		if r == nil {
			continue
		}
		t.ShakeAmount += int64(r.ShakeAmount)
		t.OpenAmount += int64(r.OpenAmount)
		if q := r.Requests["SHAKE"]; q != nil {
			t.ShakeGot += int64(q.Status["1"])
			t.Requests += int64(q.Sent)
		}
		t.Opened += int64(r.OpenLearned) // shares told by a repeated OPEN (answered 1)
		if q := r.Requests["OPEN"]; q != nil {
			t.Opened += int64(q.Status["0"])
		}
	}
	return t
}

// summedChecks compares the load clients' money with the servers', all added
// up: what each client reconciled with its own server, once more in total.
func summedChecks(srv, cli totals) []harness.LedgerCheck {
	return []harness.LedgerCheck{
		{Name: "Σ clients' SHAKE amounts = Σ shake.got_amount", Left: cli.ShakeAmount, Right: srv.ShakeAmount},
		{Name: "Σ clients' SHAKEs that got one = Σ shake.got", Left: cli.ShakeGot, Right: srv.ShakeGot},
		{Name: "Σ clients' OPEN amounts = Σ envelopes.opened_amount", Left: cli.OpenAmount, Right: srv.OpenAmount},
		{Name: "Σ clients' OPENs ok and shares learned = Σ envelopes.opened", Left: cli.Opened, Right: srv.Opened},
		{Name: "Σ clients' SHAKEs sent = Σ shake.requests", Left: cli.Requests, Right: srv.Requests},
	}
}
