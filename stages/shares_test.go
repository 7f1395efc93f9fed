package stages

import (
	"encoding/binary"
	"testing"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
)

func shareEvent(op uint8, p []byte) *event.Event {
	b := bytebufferpool.Get()
	b.B = append(b.B[:0], p...)
	return &event.Event{Kind: event.KShare, Status: op, Buf: b}
}

// TestShares: a SET takes a campaign's share once, ends it once with what
// it dealt, keeps it through a snapshot and a replay alike, and never takes
// again a share it ended and forgot.
func TestShares(t *testing.T) {
	s := NewShake(new(ledger.Ledger))
	var recs []journal.Record
	apply := func(op uint8, p []byte) bool {
		changed := s.share(shareEvent(op, p))
		if changed {
			typ := RecShare
			if op == ShareEnd {
				typ = RecShareEnd
			}
			recs = append(recs, journal.Record{Type: typ, Payload: append([]byte(nil), p...)})
		}
		return changed
	}
	sh := Share{Rate: 10, Total: 100, Min: 1, Max: 9}
	if !apply(ShareStart, AppendShare(nil, 7, sh)) || apply(ShareStart, AppendShare(nil, 7, sh)) {
		t.Fatal("a share taken twice, or not at all")
	}
	if !apply(ShareEnd, AppendShareEnd(nil, 7, 100, 480)) || apply(ShareEnd, AppendShareEnd(nil, 7, 1, 1)) {
		t.Fatal("a share ended twice, or not at all")
	}
	apply(ShareStart, AppendShare(nil, 8, Share{Send: true, Rate: 1, Total: 3, Min: 3, Max: 30, Recipients: 3}))
	want := s.Campaigns(&Split{}).Shares
	if got := want[7]; !got.Ended || got.N != 100 || got.Amount != 480 || got.Total != 100 {
		t.Fatalf("share 7: %+v", got)
	}

	// A replay of the records and a snapshot's part both give it back.
	replayed := NewShake(new(ledger.Ledger))
	var egress ledger.EgressCounters
	for _, r := range recs {
		if err := replayed.Restore(r, &egress); err != nil {
			t.Fatal(err)
		}
	}
	part := appendCounters(nil, s.snapshotted())
	part = append(part, make([]byte, 8+4+8)...) // lastDealt, no tallies, an empty pool
	part = s.ans.appendTo(part)
	part = s.shares.appendTo(part)
	loaded := NewShake(new(ledger.Ledger))
	if err := loaded.Load(part, &egress); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*Shake{"replayed": replayed, "loaded": loaded} {
		got := st.Campaigns(&Split{}).Shares
		if len(got) != len(want) || got[7] != want[7] || got[8] != want[8] {
			t.Fatalf("%s shares %+v; want %+v", name, got, want)
		}
	}

	// Past MaxEndedShares ended, the oldest are forgotten, and never taken again.
	for id := uint32(100); id < 100+MaxEndedShares; id++ {
		apply(ShareStart, AppendShare(nil, id, sh))
		apply(ShareEnd, AppendShareEnd(nil, id, 100, 100))
	}
	if _, ok := s.Campaigns(&Split{}).Shares[7]; ok {
		t.Fatal("the oldest ended share kept past the bound")
	}
	if apply(ShareStart, AppendShare(nil, 7, sh)) {
		t.Fatal("a forgotten share taken again")
	}
}

// FuzzShareRecords: a share record of any bytes is applied or refused,
// never a panic, and what a replay takes survives the snapshot.
func FuzzShareRecords(f *testing.F) {
	f.Add(AppendShare(nil, 3, Share{Rate: 1, Total: 2, Min: 1, Max: 2}), AppendShareEnd(nil, 3, 2, 3))
	f.Add([]byte{0, 0, 0, 1}, []byte{})
	f.Fuzz(func(t *testing.T, start, end []byte) {
		s := NewShake(new(ledger.Ledger))
		var egress ledger.EgressCounters
		if s.Restore(journal.Record{Type: RecShare, Payload: start}, &egress) != nil {
			return
		}
		if s.Restore(journal.Record{Type: RecShareEnd, Payload: end}, &egress) != nil {
			return
		}
		part := appendCounters(nil, s.snapshotted())
		part = append(part, make([]byte, 8+4+8)...)
		part = s.ans.appendTo(part)
		part = s.shares.appendTo(part)
		loaded := NewShake(new(ledger.Ledger))
		if err := loaded.Load(part, &egress); err != nil {
			t.Fatalf("a snapshot of shares a replay took: %v", err)
		}
	})
}

// FuzzKeptPushes: the session's kept-push records and snapshot list, of any
// bytes, are applied or refused, never a panic; what they keep survives the
// list a snapshot carries, in the same order.
func FuzzKeptPushes(f *testing.F) {
	keep := func(user uint32, env uint64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(nil, user), env)
	}
	f.Add(append(keep(7, 99), keep(8, 100)...), []byte{0, 0, 0, 7})
	f.Add([]byte{0, 0, 0, 1}, []byte{})
	f.Fuzz(func(t *testing.T, keeps, take []byte) {
		s := NewSession(0, nil, new(ledger.Ledger), Limits{PendingPerUser: 3}, 1)
		for len(keeps) >= 12 {
			s.Restore(journal.Record{Type: RecKeep, Payload: keeps[:12]})
			keeps = keeps[12:]
		}
		s.Restore(journal.Record{Type: RecTake, Payload: take})
		list := s.pend.appendTo(nil)
		again := NewSession(0, nil, new(ledger.Ledger), Limits{PendingPerUser: 3}, 1)
		if err := again.LoadPending(list); err != nil {
			t.Fatalf("a list of kept pushes refused: %v", err)
		}
		if got := again.pend.appendTo(nil); string(got) != string(list) {
			t.Fatalf("kept pushes %x loaded back as %x", list, got)
		}
		if err := again.LoadPending(keeps); err == nil && pendingLen(keeps) != len(keeps) {
			t.Fatal("a list of a broken length loaded")
		}
	})
}
