package main

import "github.com/hongbao-io/hongbao/perf/internal/harness"

// totals are the money and the counts of all servers, or of all load
// clients, added up.
type totals struct {
	ShakeGot, ShakeAmount, Requests     int64
	Opened, OpenAmount                  int64 // shares opened
	Created, CreatedAmount, Outstanding int64 // group envelopes
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
	t.Requests += st.Shake.Requests
}

// sumTotals adds up the servers' /stats and the load clients' reports.
func sumTotals(ps []*pair) (srv, cli totals) {
	for _, p := range ps {
		srv.add(&p.stats)
		if r := p.rep; r != nil {
			cli.ShakeAmount += int64(r.ShakeAmount)
			cli.OpenAmount += int64(r.OpenAmount)
			cli.Opened += int64(r.OpenLearned) // shares told by a repeated OPEN (answered 1)
			if q := r.Requests["SHAKE"]; q != nil {
				cli.ShakeGot += int64(q.Status["1"])
				cli.Requests += int64(q.Sent)
			}
			if q := r.Requests["OPEN"]; q != nil {
				cli.Opened += int64(q.Status["0"])
			}
		}
	}
	return srv, cli
}

// summedChecks is what each client reconciled with its own server, once
// more in total.
func summedChecks(srv, cli totals) []harness.LedgerCheck {
	return []harness.LedgerCheck{
		{Name: "Σ clients' SHAKE amounts = Σ shake.got_amount", Left: cli.ShakeAmount, Right: srv.ShakeAmount},
		{Name: "Σ clients' SHAKEs that got one = Σ shake.got", Left: cli.ShakeGot, Right: srv.ShakeGot},
		{Name: "Σ clients' OPEN amounts = Σ envelopes.opened_amount", Left: cli.OpenAmount, Right: srv.OpenAmount},
		{Name: "Σ clients' OPENs ok and shares learned = Σ envelopes.opened", Left: cli.Opened, Right: srv.Opened},
		{Name: "Σ clients' SHAKEs sent = Σ shake.requests", Left: cli.Requests, Right: srv.Requests},
	}
}
