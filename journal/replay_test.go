package journal

import (
	"errors"
	"slices"
	"testing"
)

// TestReplayFromSnapshot: a replay from a snapshot skips each producer's
// records up to its mark of that snapshot, and the segments before the
// snapshot's; a mark of another snapshot, earlier or later, changes nothing.
func TestReplayFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, nil)
	a, b := j.Producer(), j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	a.Append(RecTest, []byte("a1"))
	b.Mark(6) // a snapshot never kept
	a.Publish()
	b.Publish()
	seg, err := j.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	a.Append(RecTest, []byte("a2"))
	a.Mark(7)
	b.Append(RecTest, []byte("b1"))
	a.Append(RecTest, []byte("a3"))
	b.Mark(7)
	b.Append(RecTest, []byte("b2"))
	b.Mark(8) // a later snapshot, cut short by a crash
	a.Publish()
	if err := b.Wait(b.Append(RecTest, []byte("b3"))); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(a.Pos()); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j = open(t, dir, nil)
	var got []string
	if err := j.Replay(From{ID: 7, Segment: seg}, func(r Record) error {
		got = append(got, string(r.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	equalPerProducer(t, replayed(got), replayed([]string{"a3", "b2", "b3"}))
	if err := j.RemoveBefore(seg); err != nil {
		t.Fatal(err)
	}
	if names := segmentFiles(t, dir); len(names) != 1 || names[0] != segmentName(seg) {
		t.Fatalf("segments after RemoveBefore(%d): %v", seg, names)
	}
	if _, err := Open(Options{Dir: dir, Sets: 4}); !errors.Is(err, ErrMissing) {
		t.Fatalf("a start without the snapshot after its RemoveBefore: %v; want it refused (older state)", err)
	}
	j = open(t, dir, func(o *Options) { o.Base = seg })
	var all []string
	if err := j.Replay(From{Segment: seg}, func(r Record) error { all = append(all, string(r.Payload)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 { // from the snapshot's segment, no snapshot state: every record, no marks
		t.Fatalf("%d records replayed from segment %d; want 5: %v", len(all), seg, all)
	}
}

func replayed(payloads []string) []rec {
	var rs []rec
	for _, p := range payloads {
		rs = append(rs, rec{RecTest, uint16(p[0] - 'a'), p})
	}
	return rs
}

// TestReplayNeedsMarks: a replay from a snapshot refuses a journal without
// the mark of a producer the snapshot holds, and under Repair marks it
// again, so that its later records replay.
func TestReplayNeedsMarks(t *testing.T) {
	b := build(t, spec{rounds: 2, perRound: 2, ckAfter: []int{2}})
	j := open(t, b.dir, nil)
	j.Producer()
	from := From{ID: 9, Marked: []uint16{0}}
	if err := j.Replay(from, func(Record) error { return nil }); !errors.Is(err, ErrMissing) {
		t.Fatalf("no mark: %v; want it refused", err)
	}
	j = open(t, b.dir, func(o *Options) { o.Repair = true })
	p := j.Producer()
	if err := j.Replay(from, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if r := j.Remarked(); !slices.Equal(r, []uint16{0}) {
		t.Fatalf("remarked %v; want [0]", r)
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(RecTest, []byte("after"))); err != nil {
		t.Fatal(err)
	}
	j.Close()
	var got []string
	if err := open(t, b.dir, nil).Replay(from, func(r Record) error { got = append(got, string(r.Payload)); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"after"}) {
		t.Fatalf("replayed %q after the new mark; want the record appended after it", got)
	}
}
