package journal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSink keeps messages as a JetStream stream with a subject per group
// would: each appended only if its group's last message is the one expected.
type fakeSink struct {
	mu   sync.Mutex
	seq  uint64
	last map[int]uint64
	msgs map[int][][]byte
	gens map[int][]Batch // each group's batches as committed: their Gen and Rollup
	fail map[int]error   // the group's next messages fail so
	max  int
}

func newFakeSink() *fakeSink {
	return &fakeSink{last: map[int]uint64{}, msgs: map[int][][]byte{}, gens: map[int][]Batch{}, fail: map[int]error{}, max: 1 << 20}
}

var errUnavailable = errors.New("injected: no JetStream")

func (f *fakeSink) Commit(bs []Batch) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range bs {
		b := &bs[i]
		switch {
		case f.fail[b.Group] != nil:
			b.Err = f.fail[b.Group]
		case f.last[b.Group] != b.ExpectLast:
			b.Err = fmt.Errorf("%w: last %d, expected %d", ErrFenced, f.last[b.Group], b.ExpectLast)
		default:
			f.seq++
			f.last[b.Group], b.Seq = f.seq, f.seq
			f.msgs[b.Group] = append(f.msgs[b.Group], append([]byte(nil), b.Data...))
			f.gens[b.Group] = append(f.gens[b.Group], Batch{Gen: b.Gen, Rollup: b.Rollup, Seq: b.Seq})
		}
	}
}

func (f *fakeSink) MaxBatch() int { return f.max }

// other appends a message to group as another writer would (a claim).
func (f *fakeSink) other(group int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.last[group] = f.seq
	f.msgs[group] = append(f.msgs[group], nil)
	return f.seq
}

func (f *fakeSink) setFail(group int, err error) {
	f.mu.Lock()
	f.fail[group] = err
	f.mu.Unlock()
}

func (f *fakeSink) messages(group int) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.msgs[group]...)
}

func openSink(t testing.TB, sink Sink, mod func(*Options)) *Journal {
	t.Helper()
	o := Options{Sink: sink, RingBytes: 4096, RoundEvery: -1}
	if mod != nil {
		mod(&o)
	}
	j, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func payloads(t testing.TB, msgs [][]byte) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		if _, err := walk(m, 0, func(r Record) error { out = append(out, string(r.Payload)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSinkGroupNotOpenCostsNothing: a producer whose group is not open here
// has no ring, drops what it is given without waking the writer, and none
// of its positions becomes durable; the open group's rounds go on.
func TestSinkGroupNotOpenCostsNothing(t *testing.T) {
	sink := newFakeSink()
	dir := t.TempDir()
	j := openSink(t, sink, func(o *Options) { o.Dir = dir })
	open, closed := j.ProducerIn(0), j.ProducerIn(1)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Reopen(0, 0); err != nil {
		t.Fatal(err)
	}
	if closed.buf != nil || !closed.Failed() || open.Failed() {
		t.Fatalf("a closed group's producer: ring %d bytes, failed %v; the open one's failed %v", len(closed.buf), closed.Failed(), open.Failed())
	}
	var pos uint64
	for range 1000 {
		pos = closed.Append(RecTest, []byte("nobody hears this"))
		closed.Publish()
	}
	if err := closed.Wait(pos); !errors.Is(err, ErrNotOpen) || closed.Durable(pos) || !j.Lost(closed.ID(), pos) {
		t.Fatalf("a closed group's record: %v, durable %v, lost %v; want ErrNotOpen, never durable", err, closed.Durable(pos), j.Lost(closed.ID(), pos))
	}
	if err := open.Wait(open.Append(RecTest, []byte("heard"))); err != nil {
		t.Fatal(err)
	}
	if n := j.M.Rounds.Load(); n != 1 || len(sink.messages(1)) != 0 {
		t.Fatalf("%d rounds and %d messages of the closed group; want 1 round, none of its", n, len(sink.messages(1)))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a journal with a sink wrote %d files in its Dir", len(ents))
	}
	if _, err := j.Rotate(); !errors.Is(err, errSink) {
		t.Fatalf("Rotate with a sink: %v", err)
	}
	if err := j.Replay(From{}, nil); !errors.Is(err, errSink) {
		t.Fatalf("Replay with a sink: %v", err)
	}
	if err := j.RemoveBefore(1); !errors.Is(err, errSink) {
		t.Fatalf("RemoveBefore with a sink: %v", err)
	}
}

// TestSinkFenceThenReopen: a group whose message is refused is fenced (its
// hook runs, its waiters get ErrFenced, the other group goes on); records
// given to it while fenced, a full ring's and more, stay lost after a
// Reopen, and what is appended after it becomes durable.
func TestSinkFenceThenReopen(t *testing.T) {
	sink := newFakeSink()
	var fenced []int
	j := openSink(t, sink, func(o *Options) { o.OnFenced = func(g int, _ error) { fenced = append(fenced, g) } })
	a, b := j.ProducerIn(0), j.ProducerIn(1)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for g := range 2 {
		if err := j.Reopen(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Wait(a.Append(RecTest, []byte("a1"))); err != nil {
		t.Fatal(err)
	}
	claim := sink.other(0)
	pa := a.Append(RecTest, []byte("a2"))
	pb := b.Append(RecTest, []byte("b1"))
	a.Publish()
	if err := a.Wait(pa); !errors.Is(err, ErrFenced) {
		t.Fatalf("a fenced group's waiter: %v; want ErrFenced", err)
	}
	var ge *GroupError
	if err := j.GroupErr(0); !errors.As(err, &ge) || ge.Group != 0 || len(fenced) != 1 || fenced[0] != 0 {
		t.Fatalf("GroupErr %v, OnFenced %v; want group 0 fenced once", err, fenced)
	}
	if err := b.Wait(pb); err != nil {
		t.Fatalf("the other group: %v", err)
	}
	// Fenced: a whole ring and more is given, most of it dropped.
	var lost []uint64
	for k := range 400 {
		lost = append(lost, a.Append(RecTest, fmt.Appendf(nil, "lost %d", k)))
		a.Publish()
	}
	if err := j.Reopen(0, claim); err != nil {
		t.Fatal(err)
	}
	if a.Failed() {
		t.Fatal("reopened, still failed")
	}
	// What the stage holds right after a Reopen was loaded from the sink:
	// an answer about it (a repeated OPEN) waits for nothing.
	if pos := a.Pos(); pos != 0 || !a.Durable(pos) {
		t.Fatalf("Pos right after a Reopen: %d (durable %v); want 0, nothing to wait for", pos, a.Durable(pos))
	}
	after := a.Append(RecTest, []byte("a3"))
	if err := a.Wait(after); err != nil {
		t.Fatal(err)
	}
	for _, pos := range append(lost, pa) {
		if a.Durable(pos) || !j.Lost(a.ID(), pos) {
			t.Fatalf("position %d, given before the reopen, durable %v after it (durable up to %d)", pos, a.Durable(pos), a.durable.Load())
		}
	}
	if err := a.Wait(lost[len(lost)-1]); !errors.Is(err, ErrReopened) {
		t.Fatalf("Wait on a record from before the reopen: %v; want ErrReopened", err)
	}
	got := payloads(t, sink.messages(0))
	if len(got) != 2 || got[0] != "a1" || got[1] != "a3" {
		t.Fatalf("group 0's messages hold %q; want a1, then (after the claim) a3 only", got)
	}
}

// TestSinkFailureAndRelease: a failed message fails its group (not fenced:
// its own hook), a released group drops what it holds, and neither stops
// the other.
func TestSinkFailureAndRelease(t *testing.T) {
	sink := newFakeSink()
	failed := map[int]error{}
	j := openSink(t, sink, func(o *Options) {
		o.OnGroupFailed = func(g int, err error) { failed[g] = err }
		o.OnFenced = func(g int, _ error) { t.Errorf("group %d fenced", g) }
	})
	ps := []*Producer{j.ProducerIn(0), j.ProducerIn(1), j.ProducerIn(ClusterGroup)}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, g := range []int{0, 1, ClusterGroup} {
		if err := j.Reopen(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	sink.setFail(0, errUnavailable)
	p0 := ps[0].Append(RecTest, []byte("x"))
	ps[0].Publish()
	if err := ps[0].Wait(p0); !errors.Is(err, errUnavailable) || errors.Is(err, ErrFenced) || !errors.Is(failed[0], errUnavailable) {
		t.Fatalf("a failed group's waiter: %v, hook %v; want the sink's error", err, failed[0])
	}
	p1 := ps[1].Append(RecTest, []byte("y"))
	if err := j.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := ps[1].Wait(p1); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("a released group's waiter: %v; want ErrNotOpen", err)
	}
	if err := ps[2].Wait(ps[2].Append(RecTest, []byte("z"))); err != nil {
		t.Fatalf("the cluster group: %v", err)
	}
	if got := payloads(t, sink.messages(ClusterGroup)); len(got) != 1 || len(sink.messages(0))+len(sink.messages(1)) != 0 {
		t.Fatalf("messages: cluster %q, groups 0 and 1 %d; want z alone", got, len(sink.messages(0))+len(sink.messages(1)))
	}
	if err := j.Reopen(7, 0); err == nil {
		t.Fatal("a group with no producer reopened")
	}
	if err := open(t, t.TempDir(), nil).Reopen(0, 0); err == nil {
		t.Fatal("a journal without a sink reopened a group")
	}
}

// TestSinkMarkSeq: a durable mark's message sequence is known, for the
// group's snapshot; a mark not yet durable is not.
func TestSinkMarkSeq(t *testing.T) {
	sink := newFakeSink()
	j := openSink(t, sink, nil)
	p := j.ProducerIn(3)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Reopen(3, 0); err != nil {
		t.Fatal(err)
	}
	p.Append(RecTest, []byte("before"))
	if err := p.Wait(p.Mark(11)); err != nil {
		t.Fatal(err)
	}
	seq, ok := j.MarkSeq(p.ID(), 11)
	if !ok || seq != sink.last[3] {
		t.Fatalf("mark 11 at %d (%v); want the group's message %d", seq, ok, sink.last[3])
	}
	if _, ok := j.MarkSeq(p.ID(), 12); ok {
		t.Fatal("a mark never made has a sequence")
	}
	sink.setFail(3, errUnavailable)
	pos := p.Mark(12)
	p.Publish()
	if err := p.Wait(pos); err == nil {
		t.Fatal("a failed mark waited out")
	}
	if _, ok := j.MarkSeq(p.ID(), 12); ok {
		t.Fatal("a mark that never became durable has a sequence")
	}
	if s, ok := j.MarkSeq(p.ID(), 11); !ok || s != seq {
		t.Fatal("the older mark forgotten")
	}
}

// TestSinkRefusesGroupPastMessage: a group whose rings could hold more than
// one message is refused at Start.
func TestSinkRefusesGroupPastMessage(t *testing.T) {
	sink := newFakeSink()
	sink.max = 6000
	j := openSink(t, sink, nil)
	j.ProducerIn(0)
	j.ProducerIn(0)
	if err := j.Start(); err == nil {
		j.Close()
		t.Fatal("two 4 KiB rings started in one group of 6,000-byte messages")
	}
}

// nopSink acknowledges every message, keeping nothing: the writer's own
// cost.
type nopSink struct{ seq uint64 }

func (s *nopSink) Commit(bs []Batch) {
	for i := range bs {
		s.seq++
		bs[i].Seq = s.seq
	}
}
func (*nopSink) MaxBatch() int { return 1 << 20 }

// TestSinkRoundAllocatesNothing: the journal's side of a round with a sink
// (gathering each group's message, the durable positions, the marks'
// sequences) allocates nothing; a producer of a group not open here
// allocates nothing either.
func TestSinkRoundAllocatesNothing(t *testing.T) {
	j := openSink(t, &nopSink{}, func(o *Options) { o.RingBytes = 1 << 16 })
	var ps []*Producer
	for g := range 4 {
		ps = append(ps, j.ProducerIn(g), j.ProducerIn(g))
	}
	closed := j.ProducerIn(9)
	for g := range 4 {
		if err := j.Reopen(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.startSink(); err != nil { // the writer's goroutine not started: commitSink runs here
		t.Fatal(err)
	}
	payload := make([]byte, 12)
	allocs := testing.AllocsPerRun(2000, func() {
		for _, p := range ps {
			for range 3 {
				p.Append(RecTest, payload)
			}
			p.Publish()
		}
		ps[0].Mark(1)
		ps[0].Publish()
		closed.Append(RecTest, payload)
		closed.Publish()
		if !j.commitSink() {
			t.Fatal("a round published nothing")
		}
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per round; want 0", allocs)
	}
}

// TestRotateUnderSteadyLoad: a Rotate is served between rounds while every
// round has records, not only when the writer finds nothing: each round's
// OnDurable appends the next round's record.
func TestRotateUnderSteadyLoad(t *testing.T) {
	var p *Producer
	var stop atomic.Bool
	j := open(t, t.TempDir(), func(o *Options) {
		o.RoundEvery = time.Millisecond
		o.OnDurable = func() {
			if !stop.Load() {
				p.Append(RecTest, []byte("steady"))
				p.Publish()
			}
		}
	})
	p = j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	p.Append(RecTest, []byte("first"))
	p.Publish()
	rotated := make(chan error, 1)
	go func() { _, err := j.Rotate(); rotated <- err }()
	select {
	case err := <-rotated:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Rotate not served within 20 s of rounds that all had records")
	}
	stop.Store(true)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSinkDrain: Drain returns once everything a group's producers
// published is durable, with the group's last message: the one holding
// their last record; a failed group's Drain says why.
func TestSinkDrain(t *testing.T) {
	sink := newFakeSink()
	j := openSink(t, sink, func(o *Options) { o.OnGroupFailed = func(int, error) {} })
	a, b, c := j.ProducerIn(0), j.ProducerIn(0), j.ProducerIn(1)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, g := range []int{0, 1} {
		if err := j.Reopen(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 50 {
		a.Append(RecTest, []byte{byte(k)})
		b.Append(RecTest, []byte{byte(k)})
		a.Publish()
		b.Publish()
	}
	last, err := j.Drain(0)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Durable(a.Pos()) || !b.Durable(b.Pos()) {
		t.Fatal("Drain returned before every record was durable")
	}
	sink.mu.Lock()
	want := sink.last[0]
	sink.mu.Unlock()
	if last != want || last == 0 {
		t.Fatalf("Drain's last message %d; the sink's last of the group %d", last, want)
	}
	sink.setFail(1, errUnavailable)
	c.Append(RecTest, []byte("x"))
	c.Publish()
	if _, err := j.Drain(1); !errors.Is(err, errUnavailable) {
		t.Fatalf("a failed group's Drain: %v; want the sink's error", err)
	}
}

// TestRotateAndCompact: a group's rounds go to its generation, which
// RotateGroup moves on (modulo Gens) and reports; Compact appends, after the
// group's last message, a message of no records dropping the generation
// asked, and the group's next round follows it; both refuse a group not
// open, and a Compact the sink refuses fences the group.
func TestRotateAndCompact(t *testing.T) {
	sink := newFakeSink()
	j := openSink(t, sink, nil)
	p := j.ProducerIn(3)
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.RotateGroup(3); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("rotating a group not open: %v; want ErrNotOpen", err)
	}
	if err := j.Reopen(3, 0); err != nil {
		t.Fatal(err)
	}
	round := func() {
		t.Helper()
		if err := p.Wait(p.Append(1, []byte("r"))); err != nil {
			t.Fatal(err)
		}
	}
	round()
	for want := range uint8(4) {
		retired, err := j.RotateGroup(3)
		if err != nil || retired != want%Gens {
			t.Fatalf("rotation %d retired generation %d, %v; want %d", want, retired, err, want%Gens)
		}
		round()
	}
	if err := j.Compact(3, 2); err != nil {
		t.Fatal(err)
	}
	round()
	var got []string
	for _, b := range sink.gens[3] {
		got = append(got, fmt.Sprintf("%d%v", b.Gen, b.Rollup))
	}
	if want := []string{"0false", "1false", "2false", "0false", "1false", "2true", "1false"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches (generation, rollup) %v; want %v", got, want)
	}
	sink.other(3)
	if err := j.Compact(3, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("a compaction after another writer's message: %v; want fenced", err)
	}
	if err := j.GroupErr(3); !errors.Is(err, ErrFenced) {
		t.Fatalf("the group after its compaction was refused: %v; want fenced", err)
	}
}
