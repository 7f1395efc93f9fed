package harness

import (
	"strings"
	"testing"
)

func TestLedgerChecks(t *testing.T) {
	var st Stats
	st.Shake.CreatedAmount, st.Shake.GotAmount, st.Shake.PoolAmount = 100, 60, 40
	st.Envelopes.Created, st.Envelopes.CreatedAmount = 2, 50
	st.Envelopes.OpenedAmount, st.Envelopes.OutstandingAmount = 45, 5
	camps := []Campaign{{Kind: "shake", Amount: 100, Dealt: 5}, {Kind: "send", Amount: 50, Dealt: 2}}
	if bad := FailedChecks(LedgerChecks(&st, camps)); len(bad) > 0 {
		t.Errorf("a balanced ledger: %v", bad)
	}
	if cs := LedgerChecks(&st, nil); len(cs) != 2 || len(FailedChecks(cs)) > 0 {
		t.Errorf("no campaigns (an interrupted run): %+v; want the two invariants, holding", cs)
	}
	st.Shake.PoolAmount = 39 // a fen lost
	if bad := FailedChecks(LedgerChecks(&st, camps)); len(bad) != 1 || !strings.Contains(bad[0], "got_amount + pool_amount") {
		t.Errorf("a fen lost: %v; want the shake invariant to fail", bad)
	}
	st.Shake.PoolAmount = 40
	st.Envelopes.Created = 1 // one send campaign envelope not created, none skipped
	if bad := FailedChecks(LedgerChecks(&st, camps)); len(bad) != 1 || !strings.Contains(bad[0], "created + skipped") {
		t.Errorf("an envelope missing: %v; want the send count check to fail", bad)
	}
}
