package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func open(t testing.TB, dir string, mod func(*Options)) *Journal {
	t.Helper()
	o := Options{Dir: dir, Sets: 4, RingBytes: 4096}
	if mod != nil {
		mod(&o)
	}
	j, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

type rec struct {
	typ     uint8
	pid     uint16
	payload string
}

func replay(t testing.TB, j *Journal) []rec {
	t.Helper()
	var got []rec
	if err := j.Replay(From{}, func(r Record) error {
		got = append(got, rec{r.Type, r.PID, string(r.Payload)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// write appends n records per producer, interleaved, each batch published,
// and waits until they are durable.
func write(t testing.TB, j *Journal, producers, n int) []rec {
	t.Helper()
	ps := make([]*Producer, producers)
	for i := range ps {
		ps[i] = j.Producer()
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	var want []rec
	var last []uint64 = make([]uint64, producers)
	for k := range n {
		for i, p := range ps {
			payload := strings.Repeat(string(rune('a'+i)), k%7) + string(rune('0'+k%10))
			last[i] = p.Append(uint8(k%250+1), []byte(payload))
			want = append(want, rec{uint8(k%250 + 1), p.ID(), payload})
			if k%3 == 0 {
				p.Publish()
			}
		}
	}
	for i, p := range ps {
		if err := p.Wait(last[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// perProducer keeps each producer's records in order: the guarantee across
// producers is only that each one's order holds.
func perProducer(rs []rec) map[uint16][]rec {
	m := map[uint16][]rec{}
	for _, r := range rs {
		m[r.pid] = append(m[r.pid], r)
	}
	return m
}

func equalPerProducer(t *testing.T, got, want []rec) {
	t.Helper()
	g, w := perProducer(got), perProducer(want)
	if len(g) != len(w) {
		t.Fatalf("records of %d producers replayed; want %d", len(g), len(w))
	}
	for pid, ws := range w {
		gs := g[pid]
		if len(gs) != len(ws) {
			t.Fatalf("producer %d: %d records replayed; want %d", pid, len(gs), len(ws))
		}
		for i := range ws {
			if gs[i] != ws[i] {
				t.Fatalf("producer %d record %d: replayed %+v; want %+v", pid, i, gs[i], ws[i])
			}
		}
	}
}

func TestReplayOrder(t *testing.T) {
	dir := t.TempDir()
	// Small segments and rings: rotation and ring wrap-around happen many times.
	want := write(t, open(t, dir, func(o *Options) { o.SegmentBytes = 2048; o.RingBytes = 1024 }), 5, 400)
	j := open(t, dir, nil)
	if len(j.segs) < 5 {
		t.Fatalf("%d segments; want several (rotation)", len(j.segs))
	}
	equalPerProducer(t, replay(t, j), want)

	// A restarted journal appends after what it replayed.
	more := write(t, j, 2, 10)
	equalPerProducer(t, replay(t, open(t, dir, nil)), append(want, more...))
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := listSegments(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

func TestOtherSetsRefused(t *testing.T) {
	dir := t.TempDir()
	write(t, open(t, dir, nil), 1, 3)
	_, err := Open(Options{Dir: dir, Sets: 8})
	if err == nil || !strings.Contains(err.Error(), "-sets 4") {
		t.Fatalf("err %v; want a refusal naming -sets 4", err)
	}
}

func TestAppendAllocatesNothing(t *testing.T) {
	j := open(t, t.TempDir(), func(o *Options) { o.RingBytes = 1 << 16 })
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	payload := make([]byte, 12)
	var pos uint64
	allocs := testing.AllocsPerRun(5000, func() {
		binary.BigEndian.PutUint64(payload, pos)
		pos = p.Append(RecTest, payload)
		p.Publish()
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per appended record; want 0", allocs)
	}
	if err := p.Wait(pos); err != nil {
		t.Fatal(err)
	}
}

// discard is a segment file that keeps nothing: the writer's own cost.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Sync() error                 { return nil }
func (discard) Close() error                { return nil }

// TestRoundAllocatesNothing: the writer's round — gathering, framing with its
// checksums, the write, the sync, the durable positions and the checkpoint's
// wake-up — allocates nothing.
func TestRoundAllocatesNothing(t *testing.T) {
	j := open(t, t.TempDir(), func(o *Options) {
		o.RingBytes = 1 << 16
		o.Create = func(string) (File, error) { return discard{}, nil }
	})
	ps := []*Producer{j.Producer(), j.Producer()}
	if err := j.rotate(); err != nil { // the writer's segment, without its goroutine: commit runs here
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
		if !j.commit() {
			t.Fatal("a round wrote nothing")
		}
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per round; want 0", allocs)
	}
}

// RecTest is a record type for tests: the journal gives types no meaning.
const RecTest = 0x7f

// failingFile fails its Sync (or, with writes, its Write) from the nth call
// on.
type failingFile struct {
	File
	calls  *atomic.Int64
	after  int64
	writes bool
}

var errDisk = errors.New("injected: EIO")

func (f failingFile) Sync() error {
	if !f.writes && f.calls.Add(1) > f.after {
		return errDisk
	}
	return f.File.Sync()
}

func (f failingFile) Write(b []byte) (int, error) {
	if f.writes && f.calls.Add(1) > f.after {
		return len(b) / 2, errDisk // a torn write
	}
	return f.File.Write(b)
}

func TestSyncFailureStopsDurability(t *testing.T) {
	t.Run("sync", func(t *testing.T) { failureStopsDurability(t, false) })
	t.Run("write", func(t *testing.T) { failureStopsDurability(t, true) })
}

func failureStopsDurability(t *testing.T, writes bool) {
	var calls atomic.Int64
	var failed atomic.Pointer[error]
	dir := t.TempDir()
	j := open(t, dir, func(o *Options) {
		o.Create = func(path string) (File, error) {
			f, err := createFile(path)
			return failingFile{f, &calls, 2, writes}, err // the header's and one round's succeed
		}
		o.OnFail = func(err error) { failed.Store(&err) }
	})
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(RecTest, []byte("one"))); err != nil {
		t.Fatalf("first round: %v", err)
	}
	pos := p.Append(RecTest, []byte("two"))
	if err := p.Wait(pos); !errors.Is(err, errDisk) {
		t.Fatalf("second round: %v; want the injected error", err)
	}
	if p.Durable(pos) || !j.Failed() || failed.Load() == nil {
		t.Fatalf("after a failed sync: durable %v, failed %v, reported %v", p.Durable(pos), j.Failed(), failed.Load())
	}
	// Appending after the failure neither blocks on a full ring nor becomes durable.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 1000 && time.Now().Before(deadline); i++ {
		pos = p.Append(RecTest, make([]byte, 100))
	}
	if p.Durable(pos) {
		t.Fatal("a record appended after the failure reported durable")
	}
	if err := j.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close: %v; want the injected error", err)
	}
	// A start finds the durable record, and after it what reached the file
	// whole (a failed sync may have written it: never answered, a prefix
	// still); a torn round is cut.
	got := replay(t, open(t, dir, nil))
	if len(got) == 0 || got[0].payload != "one" || writes && len(got) != 1 {
		t.Fatalf("replayed %+v after the failure; want the durable record first (and alone after a torn write)", got)
	}
}

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

// TestRoundEvery: a round starts no sooner than RoundEvery after the last
// one began, so what is published meanwhile shares one round; Close does not
// wait the interval out.
func TestRoundEvery(t *testing.T) {
	const every = 100 * time.Millisecond
	j := open(t, t.TempDir(), func(o *Options) { o.RoundEvery = every })
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(RecTest, []byte("first"))); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var pos uint64
	for range 10 {
		pos = p.Append(RecTest, []byte("more"))
		p.Publish()
	}
	if err := p.Wait(pos); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < every/2 {
		t.Errorf("the second round was durable %v after the first; want about %v", took, every)
	}
	if n := j.M.Rounds.Load(); n != 2 {
		t.Errorf("%d rounds; want 2 (the first record, then the ten published within the interval)", n)
	}
	p.Append(RecTest, []byte("last"))
	p.Publish()
	start = time.Now()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > every/2 {
		t.Errorf("Close took %v: it waited the interval out", took)
	}
	if got := replay(t, open(t, j.o.Dir, nil)); len(got) != 12 {
		t.Errorf("replayed %d records; want 12", len(got))
	}
}
