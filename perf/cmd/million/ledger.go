package main

import (
	"fmt"

	"hongbao/loadclient"
	"hongbao/perf/internal/harness"
)

// check is one equation of a ledger: left must equal right.
type check struct {
	Name  string `json:"name"`
	Left  int64  `json:"left"`
	Right int64  `json:"right"`
}

func (c check) ok() bool { return c.Left == c.Right }

func (c check) String() string {
	v := "ok"
	if !c.ok() {
		v = fmt.Sprintf("MISMATCH by %+d", c.Left-c.Right)
	}
	return fmt.Sprintf("%s: %d = %d %s", c.Name, c.Left, c.Right, v)
}

func allOK(cs []check) bool {
	for _, c := range cs {
		if !c.ok() {
			return false
		}
	}
	return true
}

// ledgerChecks are one server's invariants (PROTOCOL.md's, and the
// campaigns' amounts against what the server created) after its load client
// has gone and its campaigns are done.
func ledgerChecks(st *harness.Stats, camps []harness.Campaign) []check {
	e := &st.Envelopes
	cs := []check{
		{"shake.created_amount = got_amount + pool_amount", st.Shake.CreatedAmount, st.Shake.GotAmount + st.Shake.PoolAmount},
		{"envelopes.created_amount = opened_amount + outstanding_amount", e.CreatedAmount, e.OpenedAmount + e.OutstandingAmount},
	}
	var shake, send, sendN int64
	for _, c := range camps {
		switch c.Kind {
		case "shake":
			shake += int64(c.Amount)
		case "send":
			send += int64(c.Amount)
			sendN += int64(c.Dealt)
		}
	}
	cs = append(cs, check{"shake campaigns' amount = shake.created_amount", shake, st.Shake.CreatedAmount})
	// The load clients send no SEND: every group envelope is a campaign's,
	// unless a SET lacked online users for one (skipped).
	if e.SystemSkipped == 0 {
		cs = append(cs, check{"send campaigns' amount = envelopes.created_amount", send, e.CreatedAmount})
	}
	cs = append(cs, check{"send campaigns' envelopes = created + skipped", sendN, e.Created + e.SystemSkipped})
	return cs
}

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
		st := &s.stats
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
	return t
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
		if q := r.Requests["OPEN"]; q != nil {
			t.Opened += int64(q.Status["0"])
		}
	}
	return t
}

// summedChecks compares the load clients' money with the servers', all added
// up: what each client reconciled with its own server, once more in total.
func summedChecks(srv, cli totals) []check {
	return []check{
		{"Σ clients' SHAKE amounts = Σ shake.got_amount", cli.ShakeAmount, srv.ShakeAmount},
		{"Σ clients' SHAKEs that got one = Σ shake.got", cli.ShakeGot, srv.ShakeGot},
		{"Σ clients' OPEN amounts = Σ envelopes.opened_amount", cli.OpenAmount, srv.OpenAmount},
		{"Σ clients' OPENs ok = Σ envelopes.opened", cli.Opened, srv.Opened},
		{"Σ clients' SHAKEs sent = Σ shake.requests", cli.Requests, srv.Requests},
	}
}

// reconciled says whether a load client's report holds a passed strict
// reconciliation.
func reconciled(r *loadclient.Report) bool {
	return r != nil && r.Reconcile != nil && r.Reconcile.OK
}
