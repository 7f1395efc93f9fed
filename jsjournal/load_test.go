package jsjournal

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// twin appends the same records to a file journal and to one on JetStream,
// their producers registered alike: the file journal's replay is what a load
// from JetStream must give.
type twin struct {
	file, js *journal.Journal
	fp, jp   []*journal.Producer // by producer id
	dir      string
	claim    map[int]uint64 // each group's claim, epoch 1
}

var twinGroups = []spec{{0, 2}, {1, 1}}

func newTwin(t *testing.T, s *Store) *twin {
	t.Helper()
	tw := &twin{dir: t.TempDir(), claim: map[int]uint64{}}
	var err error
	if tw.file, err = journal.Open(journal.Options{Dir: tw.dir, Sets: 2, RingBytes: 1 << 14}); err != nil {
		t.Fatal(err)
	}
	if tw.js, err = journal.Open(journal.Options{Sink: s, RingBytes: 1 << 14}); err != nil {
		t.Fatal(err)
	}
	for _, g := range twinGroups {
		for range g.producers {
			tw.fp = append(tw.fp, tw.file.ProducerIn(g.group))
			tw.jp = append(tw.jp, tw.js.ProducerIn(g.group))
		}
	}
	for _, j := range []*journal.Journal{tw.file, tw.js} {
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range twinGroups {
		tw.claim[g.group] = claimed(t, s, g.group, 1)
		if err := tw.js.Reopen(g.group, tw.claim[g.group]); err != nil {
			t.Fatal(err)
		}
	}
	return tw
}

// append adds one record to producer pid of both journals.
func (tw *twin) append(pid int, typ uint8, payload string) {
	tw.fp[pid].Append(typ, []byte(payload))
	tw.jp[pid].Append(typ, []byte(payload))
}

// mark appends producer pid's mark of snapshot id to both.
func (tw *twin) mark(pid int, id uint64) { tw.fp[pid].Mark(id); tw.jp[pid].Mark(id) }

func (tw *twin) publish() {
	for i := range tw.fp {
		tw.fp[i].Publish()
		tw.jp[i].Publish()
	}
}

// sync waits until everything appended to both is durable.
func (tw *twin) sync(t *testing.T) {
	t.Helper()
	for i := range tw.fp {
		for _, p := range []*journal.Producer{tw.fp[i], tw.jp[i]} {
			if err := p.Wait(p.Pos()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// traffic appends n records over every producer, publishing now and then.
func (tw *twin) traffic(n, from int) {
	for k := range n {
		pid := (k*7 + k/3) % len(tw.fp)
		tw.append(pid, uint8(k%200+1), fmt.Sprintf("record %d of producer %d", from+k, pid))
		if k%5 == 4 {
			tw.publish()
		}
	}
	tw.publish()
}

// fileReplay is the file journal's replay from from (reopened), of the
// records of producers pids.
func (tw *twin) fileReplay(t *testing.T, from journal.From, pids ...uint16) []rec {
	t.Helper()
	j, err := journal.Open(journal.Options{Dir: tw.dir, Sets: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var out []rec
	if err := j.Replay(from, func(r journal.Record) error {
		if slices.Contains(pids, r.PID) {
			out = append(out, rec{r.Type, r.PID, string(r.Payload)})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLoadMatchesFileReplay: a group loaded on another gateway — its
// snapshot, then the records after its producers' marks — gives, producer
// by producer and record for record, what the file journal's replay of the
// same appends gives; a group without a snapshot replays whole; the last
// sequence returned is the subject's last.
func TestLoadMatchesFileReplay(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	tw := newTwin(t, s)
	tw.traffic(300, 0)
	tw.sync(t)
	seg, err := tw.file.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	// Snapshot 7 of group 0: its two producers mark at different points,
	// with records of each between the marks.
	const id = 7
	tw.mark(0, id)
	tw.append(1, 3, "producer 1 before its mark")
	tw.append(0, 4, "producer 0 after its mark")
	tw.publish()
	tw.sync(t)
	tw.append(1, 5, "producer 1 still before its mark")
	tw.mark(1, id)
	tw.append(1, 6, "producer 1 after its mark")
	tw.publish()
	tw.sync(t)
	seq0, ok0 := tw.js.MarkSeq(0, id)
	seq1, ok1 := tw.js.MarkSeq(1, id)
	if !ok0 || !ok1 || seq1 <= seq0 {
		t.Fatalf("marks at %d (%v) and %d (%v); want both, the second later", seq0, ok0, seq1, ok1)
	}
	parts := []Part{{PID: 0, Data: []byte("state of producer 0")}, {PID: 1, Data: []byte("state of producer 1")}}
	if err := s.PutSnapshot(ctxT(t), 0, Snapshot{ID: id, Seq: min(seq0, seq1), Epoch: 1, ClaimSeq: tw.claim[0], Parts: parts}); err != nil {
		t.Fatal(err)
	}
	tw.traffic(300, 300)
	tw.sync(t)
	if err := errors.Join(tw.file.Close(), tw.js.Close()); err != nil {
		t.Fatal(err)
	}

	other := openStore(t, ns.URL(), 2, nil)
	var restored Snapshot
	var got []rec
	r, err := other.Load(ctxT(t), 0, func(sn Snapshot) error { restored = sn; return nil }, collect(&got))
	if err != nil {
		t.Fatal(err)
	}
	if restored.ID != id || restored.Seq != min(seq0, seq1) || restored.Owner != 0 || restored.Epoch != 1 ||
		fmt.Sprint(restored.Parts) != fmt.Sprint(parts) {
		t.Fatalf("restored %+v; want snapshot %d from %d with %v", restored, id, min(seq0, seq1), parts)
	}
	want := tw.fileReplay(t, journal.From{ID: id, Segment: seg, Marked: []uint16{0, 1}}, 0, 1)
	if len(want) < 100 {
		t.Fatalf("the file journal replays %d records of group 0 after the snapshot; want the test's", len(want))
	}
	equalPerProducer(t, got, want)
	last, err := other.Last(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.LastSeq != last.Seq || r.Records != len(want) || r.Snapshot != restored.Seq || r.Dropped != 0 {
		t.Fatalf("replayed %+v; want up to %d, %d records", r, last.Seq, len(want))
	}

	for _, g := range []struct {
		group int
		pid   uint16
	}{{1, 2}} {
		got = nil
		r, err := other.Load(ctxT(t), g.group, func(Snapshot) error { t.Fatal("a snapshot of a group that has none"); return nil }, collect(&got))
		if err != nil {
			t.Fatal(err)
		}
		want := tw.fileReplay(t, journal.From{}, g.pid)
		equalPerProducer(t, got, want)
		if last, _ := other.Last(ctxT(t), g.group); r.LastSeq != last.Seq || last.Seq == 0 {
			t.Fatalf("group %d replayed up to %d; its last message is %d", g.group, r.LastSeq, last.Seq)
		}
	}
}

// TestReplayTakesOnlyTheOwners: a replay hands over the rounds of the
// SET's owner by its claims alone, proven by the subject NATS let each
// gateway publish on, and only those NATS fenced (appended after the SET's
// last message); it drops and counts a round appended without the expected
// last sequence, even on the owner's subject, another gateway's round, a
// claim out of turn and a release by a gateway that does not own the SET.
// From a snapshot, its owner's rounds count until a claim.
func TestReplayTakesOnlyTheOwners(t *testing.T) {
	ns := startJS(t)
	a, b, x := openStore(t, ns.URL(), 0, nil), openStore(t, ns.URL(), 1, nil), openStore(t, ns.URL(), 2, nil)
	ctx := ctxT(t)
	const set = 3
	data := func(payloads ...string) []byte {
		var d []byte
		for _, p := range payloads {
			d = journal.AppendRecord(d, recTest, 9, []byte(p))
		}
		return d
	}
	// round appends s's round, fenced (as its journal does) or not.
	round := func(s *Store, fenced bool, payloads ...string) uint64 {
		t.Helper()
		m := s.message(&journal.Batch{Group: set, Data: data(payloads...)})
		var opts []jetstream.PublishOpt
		if fenced {
			last, err := s.Last(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(last.Seq, s.l.SetFilter(set)))
		}
		ack, err := s.js.PublishMsg(ctx, m, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	claim := func(s *Store, epoch uint64, release bool) {
		t.Helper()
		last, err := s.Last(ctx, set)
		if err != nil {
			t.Fatal(err)
		}
		if release {
			_, err = s.AppendRelease(ctx, set, epoch, last.Seq)
		} else {
			_, err = s.AppendClaim(ctx, set, epoch, last.Seq)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	round(x, true, "x before any claim")
	claim(a, 1, false)
	first := round(a, true, "a1", "a2")
	round(a, false, "a unfenced")
	round(x, true, "x while a owns it")
	claim(x, 5, false) // out of turn: epoch 2 is next
	claim(x, 1, true)  // a release of a SET x does not own
	claim(b, 2, false) // b takes it over
	round(b, true, "b1")
	round(a, true, "a after b's claim", "a4")
	end := round(b, true, "b2")

	var got []rec
	r, err := x.Replay(ctx, set, Snapshot{}, collect(&got))
	if err != nil {
		t.Fatal(err)
	}
	var payloads []string
	for _, g := range got {
		payloads = append(payloads, g.payload)
	}
	if want := []string{"a1", "a2", "b1", "b2"}; !slices.Equal(payloads, want) {
		t.Fatalf("replayed %q; want %q", payloads, want)
	}
	if r.Dropped != 6 || r.DroppedRecords != 4 || r.Claims != 2 || r.Owner != 1 || r.Epoch != 2 || r.LastSeq != end || r.Messages != 11 {
		t.Fatalf("replay %+v; want 6 messages (4 records of them decoded) dropped, 2 claims, gateway 1's at epoch 2, up to %d", r, end)
	}
	if n := x.Refused(RefusedUnfenced) + x.Refused(RefusedNotOwner) + x.Refused(RefusedClaim); n != 6 {
		t.Fatalf("%d refusals counted; want 6", n)
	}

	// From a snapshot owned by a at epoch 1, a's rounds count until b's claim.
	got = nil
	if r, err = x.Replay(ctx, set, Snapshot{Seq: first, Owner: 0, Epoch: 1}, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if r.Dropped != 5 || len(got) != 4 {
		t.Fatalf("from a's snapshot: %d dropped, %v handed over; want a1, a2, b1, b2", r.Dropped, got)
	}
}

// TestCompactAfterSnapshot: a group's rounds go to a new generation at each
// snapshot (journal.Journal.RotateGroup); once the next snapshot is put,
// compacting the generation before the older snapshot (journal.Journal.Compact)
// drops its messages whole, keeping every one from that snapshot on, so
// that a replay a snapshot behind is still whole; other groups keep all
// theirs; putting a snapshot keeps only its writer's newest; once a third
// is put and compacts, a replay from the first reports it moved.
func TestCompactAfterSnapshot(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	w := newWriter(t, s, []spec{{0, 1}, {1, 1}}, nil)
	ctx := ctxT(t)
	claims := map[int]uint64{}
	for _, g := range []int{0, 1} {
		claims[g] = claimed(t, s, g, 1)
		if err := w.j.Reopen(g, claims[g]); err != nil {
			t.Fatal(err)
		}
	}
	round := func(g int, payload string) {
		p := w.ps[g][0]
		if err := p.Wait(p.Append(recTest, []byte(payload))); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func(id uint64) Snapshot {
		t.Helper()
		retired, err := w.j.RotateGroup(0)
		if err != nil {
			t.Fatal(err)
		}
		p := w.ps[0][0]
		if err := p.Wait(p.Mark(id)); err != nil {
			t.Fatal(err)
		}
		seq, ok := w.j.MarkSeq(p.ID(), id)
		if !ok {
			t.Fatalf("no durable mark of snapshot %d", id)
		}
		sn := Snapshot{ID: id, Seq: seq, Epoch: 1, ClaimSeq: claims[0], Parts: []Part{{PID: p.ID(), Data: fmt.Appendf(nil, "state %d", id)}}}
		if err := s.PutSnapshot(ctx, 0, sn); err != nil {
			t.Fatal(err)
		}
		if err := w.j.Compact(0, retired+journal.Gens-1); err != nil { // the generation retired at the snapshot before
			t.Fatal(err)
		}
		sn.Owner = 0
		return sn
	}
	live := func(g int) []uint64 { // the group's messages with records
		var out []uint64
		for _, m := range messages(t, s, s.l.SetFilter(g)) {
			if len(m.Data) > 0 {
				out = append(out, m.Sequence)
			}
		}
		return out
	}
	for k := range 5 {
		round(0, fmt.Sprint("before ", k))
		round(1, fmt.Sprint("other group ", k))
	}
	before, other := live(0), live(1)
	first := snapshot(1)
	for k := range 3 {
		round(0, fmt.Sprint("after ", k))
	}
	if all := live(0); len(before) != 5 || len(all) != 9 || first.Seq <= before[len(before)-1] {
		t.Fatalf("rounds of group 0: %v before the first snapshot at %d, %v after; want none compacted", before, first.Seq, all)
	}

	second := snapshot(2)
	all := live(0)
	if len(all) != 5 || all[0] != first.Seq {
		t.Fatalf("rounds of group 0 after the second snapshot: %v; want the 5 before the first's mark (%d) compacted, it and the 4 after it kept", all, first.Seq)
	}
	if got := live(1); !slices.Equal(got, other) {
		t.Fatalf("group 1's rounds %v after group 0's snapshots; want %v", got, other)
	}
	if cs, err := s.candidates(ctx, 0); err != nil || len(cs) != 1 || cs[0].seq != second.Seq {
		t.Fatalf("snapshot objects of group 0: %v (%v); want only the newest, at %d", cs, err, second.Seq)
	}
	sn, ok, err := s.GetSnapshot(ctx, 0)
	if err != nil || !ok || sn.ID != 2 || string(sn.Parts[0].Data) != "state 2" {
		t.Fatalf("newest snapshot %+v, %v, %v; want snapshot 2", sn, ok, err)
	}
	var behind []rec
	if _, err := s.Replay(ctx, 0, first, collect(&behind)); err != nil || len(behind) != 3 {
		t.Fatalf("a replay a snapshot behind: %v, %v; want the 3 records after the first snapshot's mark", behind, err)
	}
	snapshot(3)
	if _, err := s.Replay(ctx, 0, first, func(journal.Record) error { return nil }); !errors.Is(err, ErrMoved) {
		t.Fatalf("a replay from the compacted snapshot: %v; want ErrMoved", err)
	}
	round(0, "last")
	var got []rec
	if _, err := s.Load(ctx, 0, func(Snapshot) error { return nil }, collect(&got)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].payload != "last" {
		t.Fatalf("loaded %v after snapshot 3; want the one record after its mark", got)
	}
}
