package campaign

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/journal"
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
	rc.Dealt(4, 300, 3000, true, 0)
	rc.Dealt(5, 10, 15, true, 0)
	rc.Dealt(6, 20, 100, false, 0)
	if err := r.Restore(rc); err != nil {
		t.Fatal(err)
	}
	byID := map[int]Status{}
	for _, st := range r.List() {
		byID[st.ID] = st
	}
	if st := byID[4]; st.State != Running || st.Dealt != 300 || st.Amount != 3000 || !st.Started.Equal(started) {
		t.Fatalf("campaign 4: %+v; want running, 300 dealt, started as before", st)
	}
	if byID[5].State != Cancelled || byID[6].State != Finished || byID[6].Dealt != 20 {
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
	// Deals for a campaign whose start the snapshots no longer hold (ended
	// and dropped from the last KeepFinished): not listed, its id not given
	// again.
	old := NewRecovered()
	old.Dealt(9, 1, 1, true, 0)
	r2, _ := newRunner(t, 1, Config{})
	if err := r2.Restore(old); err != nil {
		t.Fatalf("deals of a long-finished campaign: %v", err)
	}
	if l := r2.List(); len(l) != 0 {
		t.Fatalf("campaigns after restoring a long-finished one: %+v; want none listed", l)
	}
	if c, err := r2.Start(Params{Kind: Shake, Rate: 10, Total: 1, Min: 1, Max: 1}); err != nil || c.ID != 10 {
		t.Fatalf("a new campaign after it: id %v, %v; want 10", c, err)
	}
}
