package campaign

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/stages"
)

// TestRestore: recovered campaigns go on from what the SETs durably dealt
// for them and stop at their totals; cancelled and fully dealt ones are
// listed ended; a new campaign gets a new id.
func TestRestore(t *testing.T) {
	r, s := newRunner(t, 3, Config{})
	rc := NewRecovered()
	started := time.Now().Add(-time.Hour).Round(0)
	for _, c := range []*Campaign{
		{ID: 4, Params: Params{Kind: Shake, Rate: 1000, Total: 777, Min: 1, Max: 100}, Started: started},
		{ID: 5, Params: Params{Kind: Shake, Rate: 10, Total: 100, Min: 1, Max: 2}, Started: started},
		{ID: 6, Params: Params{Kind: Send, Rate: 10, Total: 20, Min: 3, Max: 9, Recipients: 3}, Started: started},
	} {
		if err := rc.Apply(journal.Record{Type: RecStarted, Payload: startedRecord(c)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.Apply(journal.Record{Type: RecCancelled, Payload: endRecord(5, started)}); err != nil {
		t.Fatal(err)
	}
	if err := rc.Apply(journal.Record{Type: RecFinished, Payload: endRecord(6, started)}); err != nil {
		t.Fatal(err)
	}
	// What the SETs hold: campaign 4 100 dealt in each of its shares of
	// 259, 259 and 259; the others' shares ended.
	for set := range 3 {
		h := s.held[set]
		h.Shares[4] = ShareOf(Params{Kind: Shake, Rate: 1000, Total: 777, Min: 1, Max: 100}, set, 3)
		h.Shake[4] = stages.Dealt{N: 100, Amount: 1000}
		h.Shares[5] = stages.Share{Rate: 4, Total: 33, Min: 1, Max: 2, Ended: true, N: 3, Amount: 5}
		h.Shares[6] = stages.Share{Send: true, Total: 7, Min: 3, Max: 9, Recipients: 3, Ended: true, N: 7, Amount: 33}
	}
	if err := r.Restore(rc); err != nil {
		t.Fatal(err)
	}
	for set := range 3 {
		r.Adopt(set, s.held[set])
	}
	byID := map[int]Status{}
	for _, st := range r.List() {
		byID[st.ID] = st
	}
	if st := byID[4]; st.State != Running || st.Dealt != 300 || st.Amount != 3000 || !st.Started.Equal(started) {
		t.Fatalf("campaign 4: %+v; want running, 300 dealt, started as before", st)
	}
	if byID[5].State != Cancelled || byID[6].State != Finished || byID[6].Dealt != 21 || byID[6].Amount != 99 {
		t.Fatalf("campaigns 5, 6: %+v, %+v; want cancelled, finished", byID[5], byID[6])
	}
	tickAll(r, time.Now().Add(10*time.Second)) // past the end at 1,000 a second
	s.settle(t, r)
	if st := r.List()[0]; st.ID != 4 || st.State != Finished || st.Dealt != 777 || s.shake != 777-300 {
		t.Fatalf("campaign 4 after its time: %+v, the SETs got %d; want finished at 777, %d dealt after the restart", st, s.shake, 777-300)
	}
	c, err := r.Start(Params{Kind: Shake, Rate: 10, Total: 1, Min: 1, Max: 1})
	if err != nil || c.ID != 7 {
		t.Fatalf("a new campaign: id %v, %v; want 7", c, err)
	}
}

// TestForgottenShares: a SET that still holds the ended share of a
// campaign the runner forgot (past KeepFinished) lists nothing, and the
// next campaign gets a later id, never that one again; a share still
// running of a forgotten campaign is dealt to its end.
func TestForgottenShares(t *testing.T) {
	r, s := newRunner(t, 2, Config{})
	s.held[0].Shares[7] = stages.Share{Rate: 1, Total: 5, Min: 1, Max: 1, Ended: true, N: 5, Amount: 5}
	s.held[1].Shares[9] = stages.Share{Rate: 1000, Total: 4, Min: 1, Max: 1}
	for set := range 2 {
		r.Adopt(set, s.held[set])
	}
	if l := r.List(); len(l) != 1 || l[0].ID != 9 {
		t.Fatalf("listed %+v; want only campaign 9, whose share runs", l)
	}
	tickAll(r, time.Now().Add(time.Second))
	s.settle(t, r)
	if got := s.received.Load(); got != 4 {
		t.Fatalf("%d dealt of campaign 9's share; want its 4", got)
	}
	c, err := r.Start(Params{Kind: Shake, Rate: 10, Total: 1, Min: 1, Max: 1})
	if err != nil || c.ID != 10 {
		t.Fatalf("a new campaign: %v, %v; want id 10", c, err)
	}
}
