package jsjournal

import (
	"errors"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// TestFollowMatchesFileReplay: a follower started from a group's snapshot
// while its owner goes on appending reads, producer by producer and record
// for record, what the file journal's replay of the same appends gives, up
// to the owner's last message; a group fallen behind a purge it did not
// read is refused (ErrGap), not followed with a hole.
func TestFollowMatchesFileReplay(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	tw := newTwin(t, s)
	tw.traffic(200, 0)
	tw.sync(t)
	seg, err := tw.file.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	const id = 9
	tw.mark(0, id)
	tw.mark(1, id)
	tw.publish()
	tw.sync(t)
	seq0, _ := tw.js.MarkSeq(0, id)
	seq1, _ := tw.js.MarkSeq(1, id)
	parts := []Part{{PID: 0, Data: []byte("p0")}, {PID: 1, Data: []byte("p1")}}
	if err := s.PutSnapshot(ctxT(t), 0, Snapshot{ID: id, Seq: min(seq0, seq1), Epoch: 1, ClaimSeq: tw.claim[0], Parts: parts}); err != nil {
		t.Fatal(err)
	}

	other := openStore(t, ns.URL(), 1, nil)
	var mu sync.Mutex
	var got []rec
	var restored Snapshot
	f, err := other.Follow(ctxT(t), 0, func(sn Snapshot) error { restored = sn; return nil }, func(r journal.Record) error {
		mu.Lock()
		got = append(got, rec{r.Type, r.PID, string(r.Payload)})
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The owner appends while the follower reads.
	for k := range 4 {
		tw.traffic(100, 1000*(k+1))
		tw.sync(t)
	}
	last, err := s.Last(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitApplied(ctxT(t), last.Seq); err != nil {
		t.Fatal(err)
	}
	r, err := f.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if restored.ID != id || r.LastSeq != last.Seq || f.Applied() != last.Seq {
		t.Fatalf("restored snapshot %d, followed to %d (applied %d); want %d up to %d", restored.ID, r.LastSeq, f.Applied(), id, last.Seq)
	}
	if err := errors.Join(tw.file.Close(), tw.js.Close()); err != nil {
		t.Fatal(err)
	}
	want := tw.fileReplay(t, journal.From{ID: id, Segment: seg, Marked: []uint16{0, 1}}, 0, 1)
	if len(want) < 150 {
		t.Fatalf("the file journal replays %d records of group 0 after the snapshot; want the test's", len(want))
	}
	equalPerProducer(t, got, want)

	// Messages purged that no snapshot holds (the follower fell behind a
	// purge): refused, not followed with a hole.
	var prev uint64
	for k := range 3 {
		b := journal.Batch{Group: 5, Data: journal.AppendRecord(nil, recTest, 9, []byte{byte(k)}), ExpectLast: prev}
		ack, err := s.js.PublishMsg(ctxT(t), s.message(&b), jetstream.WithExpectLastSequenceForSubject(prev, s.l.SetFilter(5)))
		if err != nil {
			t.Fatal(err)
		}
		prev = ack.Sequence
	}
	if err := s.stream.Purge(ctxT(t), jetstream.WithPurgeSubject(s.Subject(5, 0)), jetstream.WithPurgeSequence(prev)); err != nil {
		t.Fatal(err)
	}
	g, err := other.Follow(ctxT(t), 5, func(Snapshot) error { return nil }, func(journal.Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WaitApplied(ctxT(t), prev); !errors.Is(err, ErrGap) {
		t.Fatalf("following a group whose first messages were purged: %v; want ErrGap", err)
	}
	g.Stop()
}
