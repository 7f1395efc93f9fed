package ledger_test

import (
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/ledger"
)

// TestSumCheck: Sum adds the SETs' counters up, and Check names the
// invariant that is off.
func TestSumCheck(t *testing.T) {
	ls := []*ledger.Ledger{new(ledger.Ledger), new(ledger.Ledger)}
	for i, l := range ls {
		l.Shake.Created.Add(3)
		l.Shake.CreatedAmount.Add(300)
		l.Shake.Pool.Add(1)
		l.Shake.PoolAmount.Add(100)
		l.Egress.Got.Add(2)
		l.Egress.GotAmount.Add(200)
		l.Split.CreatedAmount.Add(1000)
		l.Split.OpenedAmount.Add(400)
		l.Split.LiveAmount.Add(uint64(600 - 100*i))
		l.Split.RefundedAmount.Add(uint64(100 * i))
	}
	st := ledger.Sum(ls)
	if st.Shake.CreatedAmount != 600 || st.Shake.GotAmount != 400 || st.Envelopes.OutstandingAmount != 1200 {
		t.Fatalf("sum: shake created %d got %d, envelopes outstanding %d; want 600, 400, 1200",
			st.Shake.CreatedAmount, st.Shake.GotAmount, st.Envelopes.OutstandingAmount)
	}
	if err := st.Check(); err != nil {
		t.Fatalf("balanced ledger: %v", err)
	}
	ls[0].Egress.GotAmount.Add(1)
	st = ledger.Sum(ls)
	if err := st.Check(); err == nil || !strings.Contains(err.Error(), "shake") || strings.Contains(err.Error(), "envelope") {
		t.Errorf("shake ledger off: Check says %v; want the shake ledger named alone", err)
	}
	ls[1].Split.OpenedAmount.Add(1)
	st = ledger.Sum(ls)
	if err := st.CheckEnvelopes(); err == nil || !strings.Contains(err.Error(), "outstanding_amount") {
		t.Errorf("envelope ledger off: CheckEnvelopes says %v", err)
	}
}
