package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// built is a journal the real writer wrote, copied as a crash would leave
// it: every round durable, the checkpoint where the test had it written.
type built struct {
	dir    string
	rounds []roundAt // in order, over the segments
	want   []rec     // every record, in order
}

// roundAt is one round as it lies on disk.
type roundAt struct {
	file     string // its segment's path
	off, end int64
	seq      uint64
	recs     []int64 // each record's offset
}

type spec struct {
	rounds, perRound int
	ckAfter          []int // the checkpoint is written after these rounds (else only the new journal's)
	segBytes         int64 // > 0: small segments, a few rounds each
}

func build(t testing.TB, sp spec) built {
	t.Helper()
	src := t.TempDir()
	j := open(t, src, func(o *Options) {
		o.RoundEvery, o.CheckpointEvery = -1, -1
		if sp.segBytes > 0 {
			o.SegmentBytes = sp.segBytes
		}
	})
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	var want []rec
	for r := 1; r <= sp.rounds; r++ {
		var pos uint64
		for k := range sp.perRound {
			payload := fmt.Sprintf("round %d record %d", r, k)
			pos = p.Append(RecTest, []byte(payload))
			want = append(want, rec{RecTest, p.ID(), payload})
		}
		if err := p.Wait(pos); err != nil { // one publication: one round
			t.Fatal(err)
		}
		if slices.Contains(sp.ckAfter, r) {
			if err := j.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	copyDir(t, src, dir)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b := built{dir: dir, want: want, rounds: layout(t, dir)}
	if len(b.rounds) != sp.rounds {
		t.Fatalf("%d rounds on disk; want %d", len(b.rounds), sp.rounds)
	}
	return b
}

func copyDir(t testing.TB, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// layout finds every round of the journal in dir.
func layout(t testing.TB, dir string) []roundAt {
	t.Helper()
	var rs []roundAt
	for _, name := range segmentFiles(t, dir) {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := parseSegHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		seq := h.prevSeq
		for off := segmentHeaderLen; off < len(b); {
			seq++
			end, _, err := checkRound(b, off, seq, nil)
			if err != nil {
				t.Fatalf("%s at %d: %v", path, off, err)
			}
			r := roundAt{file: path, off: int64(off), end: int64(end), seq: seq}
			for at := off + RoundHeaderLen; at < end; {
				_, n, _ := Decode(b[at:end])
				r.recs = append(r.recs, int64(at))
				at += n
			}
			rs = append(rs, r)
			off = end
		}
	}
	return rs
}

func (b built) last() roundAt { return b.rounds[len(b.rounds)-1] }

// upTo is the records of the first n rounds.
func (b built) upTo(n int) []rec {
	k := 0
	for _, r := range b.rounds[:n] {
		k += len(r.recs)
	}
	return b.want[:k]
}

func (b built) segment(i int) string { return filepath.Join(b.dir, segmentName(uint64(i))) }

func edit(t testing.TB, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// flipLength flips 0x80 of byte 2 of a record's length: the record then
// claims 32 KiB more than it holds.
func flipLength(t testing.TB, path string, rec int64) {
	edit(t, path, func(b []byte) []byte { b[rec+2] ^= 0x80; return b })
}

func wantCorrupt(t *testing.T, err error, file string, off int64) *CorruptError {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v; want a CorruptError naming %s at offset %d", err, file, off)
	}
	if ce.File != file || off >= 0 && ce.Offset != off {
		t.Fatalf("CorruptError names %s at offset %d; want %s at %d: %v", ce.File, ce.Offset, file, off, err)
	}
	if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), fmt.Sprint(ce.Offset)) {
		t.Fatalf("the error %q names neither the file nor the offset", err)
	}
	return ce
}

func wantReplay(t *testing.T, j *Journal, want []rec) {
	t.Helper()
	got := replay(t, j)
	if len(got) != len(want) {
		t.Fatalf("%d records replayed; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d replayed %+v; want %+v", i, got[i], want[i])
		}
	}
}

func openDir(dir string, repair bool) (*Journal, error) {
	return Open(Options{Dir: dir, Sets: 4, Repair: repair, CheckpointEvery: -1})
}

func size(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func cutFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.cut-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOpenTornOrCorrupt: a bad round is cut as a torn tail only where a
// crash can have torn it — the newest segment, at or after the checkpoint,
// nothing valid after it — and every other damage stops the start naming
// the file and offset.
func TestOpenTornOrCorrupt(t *testing.T) {
	one := spec{rounds: 5, perRound: 6}
	many := spec{rounds: 8, perRound: 6, segBytes: 600} // ~2 rounds a segment
	cases := []struct {
		name   string
		sp     spec
		ck     []int
		mutate func(t *testing.T, b built)
		check  func(t *testing.T, b built, j *Journal, err error)
	}{{
		name: "a flipped length bit in a round before the last",
		sp:   one, ck: []int{2},
		mutate: func(t *testing.T, b built) { flipLength(t, b.rounds[3].file, b.rounds[3].recs[2]) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			wantCorrupt(t, err, b.rounds[3].file, b.rounds[3].off)
			if size(t, b.rounds[3].file) != b.last().end {
				t.Fatal("the refused segment was cut")
			}
		},
	}, {
		name: "a flipped length bit in the last round, the checkpoint covering it",
		sp:   one, ck: []int{5},
		mutate: func(t *testing.T, b built) { flipLength(t, b.last().file, b.last().recs[3]) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			wantCorrupt(t, err, b.last().file, b.last().off)
		},
	}, {
		name: "a flipped length bit in the last round, after the checkpoint",
		sp:   one, ck: []int{4},
		mutate: func(t *testing.T, b built) { flipLength(t, b.last().file, b.last().recs[3]) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			if err != nil {
				t.Fatal(err)
			}
			last := b.last()
			cuts := j.Cuts()
			if len(cuts) != 1 {
				t.Fatalf("cuts %+v; want one", cuts)
			}
			c := cuts[0]
			if !c.Torn || c.File != last.file || c.Offset != last.off || c.Bytes != last.end-last.off || c.Records != 3 || c.Round != last.seq {
				t.Fatalf("cut %+v; want the torn round %d of %s at %d, %d bytes, 3 records", c, last.seq, last.file, last.off, last.end-last.off)
			}
			if kept, err := os.ReadFile(c.Kept); err != nil || len(kept) != int(c.Bytes) {
				t.Fatalf("the cut bytes are not kept beside it (%q): %v", c.Kept, err)
			}
			if size(t, last.file) != last.off || j.M.TornCuts.Load() != 1 || j.M.CutBytes.Load() != uint64(c.Bytes) || j.M.CutRecords.Load() != 3 {
				t.Fatalf("file %d bytes, metrics torn %d bytes %d records %d", size(t, last.file), j.M.TornCuts.Load(), j.M.CutBytes.Load(), j.M.CutRecords.Load())
			}
			wantReplay(t, j, b.upTo(4))
		},
	}, {
		name: "zeros to the end after the last round",
		sp:   one, ck: []int{5},
		mutate: func(t *testing.T, b built) {
			edit(t, b.last().file, func(x []byte) []byte { return append(x, make([]byte, 4096)...) })
		},
		check: func(t *testing.T, b built, j *Journal, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if c := j.Cuts(); len(c) != 1 || !c[0].Torn || c[0].Offset != b.last().end || c[0].Bytes != 4096 || c[0].Records != 0 || c[0].Kept != "" {
				t.Fatalf("cuts %+v; want one of the 4,096 zeros at %d, nothing kept", c, b.last().end)
			}
			wantReplay(t, j, b.want)
		},
	}, {
		name: "the newest segment cut in half",
		sp:   one, ck: []int{5},
		mutate: func(t *testing.T, b built) {
			edit(t, b.last().file, func(x []byte) []byte { return x[:len(x)/2] })
		},
		check: func(t *testing.T, b built, j *Journal, err error) { wantCorrupt(t, err, b.last().file, -1) },
	}, {
		name: "an older segment cut in half",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) {
			edit(t, b.segment(1), func(x []byte) []byte { return x[:len(x)/2] })
		},
		check: func(t *testing.T, b built, j *Journal, err error) { wantCorrupt(t, err, b.segment(1), -1) },
	}, {
		name: "an older segment cut at a round's end",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) {
			for _, r := range b.rounds {
				if r.file == b.segment(1) {
					edit(t, r.file, func(x []byte) []byte { return x[:r.end] })
					return
				}
			}
		},
		check: func(t *testing.T, b built, j *Journal, err error) {
			if ce := wantCorrupt(t, err, b.segment(1), -1); !errors.Is(ce, ErrShortened) {
				t.Fatalf("err %v; want it shortened", err)
			}
		},
	}, {
		name: "the newest segment deleted",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) { os.Remove(b.last().file) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			if ce := wantCorrupt(t, err, b.last().file, 0); !errors.Is(ce, ErrMissing) {
				t.Fatalf("err %v; want it missing", err)
			}
		},
	}, {
		name: "a middle segment deleted",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) { os.Remove(b.segment(1)) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			if ce := wantCorrupt(t, err, b.segment(1), 0); !errors.Is(ce, ErrMissing) {
				t.Fatalf("err %v; want it missing", err)
			}
		},
	}, {
		name: "the oldest segment deleted, no snapshot",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) { os.Remove(b.segment(0)) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			if ce := wantCorrupt(t, err, b.segment(0), 0); !errors.Is(ce, ErrMissing) {
				t.Fatalf("err %v; want it missing", err)
			}
		},
	}, {
		name: "the checkpoint deleted",
		sp:   one, ck: []int{5},
		mutate: func(t *testing.T, b built) { os.Remove(filepath.Join(b.dir, checkpointName)) },
		check: func(t *testing.T, b built, j *Journal, err error) {
			if ce := wantCorrupt(t, err, filepath.Join(b.dir, checkpointName), 0); !errors.Is(ce, ErrMissing) {
				t.Fatalf("err %v; want it missing", err)
			}
		},
	}, {
		name: "the checkpoint's newer slot torn: the older one holds",
		sp:   one, ck: []int{3, 5},
		mutate: func(t *testing.T, b built) {
			tearSlot(t, b.dir, true)
			flipLength(t, b.last().file, b.last().recs[3]) // after the older slot's position: a torn tail
		},
		check: func(t *testing.T, b built, j *Journal, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if c := j.Cuts(); len(c) != 1 || !c[0].Torn || c[0].Offset != b.last().off {
				t.Fatalf("cuts %+v; want the last round torn", c)
			}
			wantReplay(t, j, b.upTo(4))
		},
	}, {
		name: "the checkpoint's older slot torn: the newer one holds",
		sp:   one, ck: []int{3, 5},
		mutate: func(t *testing.T, b built) {
			tearSlot(t, b.dir, false)
			flipLength(t, b.last().file, b.last().recs[3])
		},
		check: func(t *testing.T, b built, j *Journal, err error) { wantCorrupt(t, err, b.last().file, b.last().off) },
	}, {
		name: "both checkpoint slots torn",
		sp:   one, ck: []int{3, 5},
		mutate: func(t *testing.T, b built) {
			edit(t, filepath.Join(b.dir, checkpointName), func(x []byte) []byte { x[30] ^= 1; x[checkpointSlot+30] ^= 1; return x })
		},
		check: func(t *testing.T, b built, j *Journal, err error) {
			wantCorrupt(t, err, filepath.Join(b.dir, checkpointName), 0)
		},
	}, {
		name: "a new segment's header torn, after the checkpoint",
		sp:   one, ck: []int{5},
		mutate: func(t *testing.T, b built) {
			h := segHeader{sets: 4, index: 1, prevLen: b.last().end, prevSeq: 5}.bytes()
			os.WriteFile(b.segment(1), h[:21], 0o644)
		},
		check: func(t *testing.T, b built, j *Journal, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if c := j.Cuts(); len(c) != 1 || !c[0].Torn || c[0].File != b.segment(1) || c[0].Offset != 0 || c[0].Bytes != 21 {
				t.Fatalf("cuts %+v; want the torn header of %s", c, b.segment(1))
			}
			if _, err := os.Stat(b.segment(1)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the torn segment is still there: %v", err)
			}
			wantReplay(t, j, b.want)
		},
	}, {
		name: "an older segment's header damaged",
		sp:   many, ck: []int{8},
		mutate: func(t *testing.T, b built) { edit(t, b.segment(1), func(x []byte) []byte { x[20] ^= 1; return x }) },
		check:  func(t *testing.T, b built, j *Journal, err error) { wantCorrupt(t, err, b.segment(1), 0) },
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := c.sp
			sp.ckAfter = c.ck
			b := build(t, sp)
			c.mutate(t, b)
			j, err := openDir(b.dir, false)
			c.check(t, b, j, err)
		})
	}
}

// tearSlot damages the checkpoint slot of the greater generation (newer) or
// the other one.
func tearSlot(t testing.TB, dir string, newer bool) {
	t.Helper()
	edit(t, filepath.Join(dir, checkpointName), func(b []byte) []byte {
		c0, _ := decodeCheckpoint(b)
		c1, _ := decodeCheckpoint(b[checkpointSlot:])
		slot := 0
		if (c1.gen > c0.gen) == newer {
			slot = 1
		}
		b[slot*checkpointSlot+30] ^= 0x10
		return b
	})
}

// TestTornTailCutAtEveryByte: the newest segment cut at any byte after the
// checkpoint loses only the round cut into; cut at any byte before it, the
// start is refused.
func TestTornTailCutAtEveryByte(t *testing.T) {
	b := build(t, spec{rounds: 4, perRound: 3, ckAfter: []int{3}})
	last := b.last()
	full, err := os.ReadFile(last.file)
	if err != nil {
		t.Fatal(err)
	}
	for cut := 0; cut <= len(full); cut++ {
		dir := t.TempDir()
		copyDir(t, b.dir, dir)
		path := filepath.Join(dir, filepath.Base(last.file))
		if err := os.WriteFile(path, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := openDir(dir, false)
		if int64(cut) < last.off {
			if !errors.As(err, new(*CorruptError)) {
				t.Fatalf("cut at %d, under the checkpoint at %d: err %v; want a CorruptError", cut, last.off, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		want, end := b.upTo(3), last.off
		if cut == len(full) {
			want, end = b.want, last.end
		}
		got := replay(t, j)
		if !slices.Equal(got, want) {
			t.Fatalf("cut at %d: replayed %d records; want %d", cut, len(got), len(want))
		}
		if size(t, path) != end {
			t.Fatalf("cut at %d: file of %d bytes; want it cut back to %d", cut, size(t, path), end)
		}
		if cuts := j.Cuts(); int64(cut) > last.off && int64(cut) < last.end && (len(cuts) != 1 || cuts[0].Bytes != int64(cut)-last.off) {
			t.Fatalf("cut at %d: cuts %+v; want one of %d bytes", cut, cuts, int64(cut)-last.off)
		}
	}
}

// TestOpenRepair: with Repair a start on damage cuts there, keeps every byte
// it cut beside the journal, lists each cut, rewrites the checkpoint, and
// leaves a journal the next start takes as whole.
func TestOpenRepair(t *testing.T) {
	t.Run("a bad round in the middle", func(t *testing.T) {
		b := build(t, spec{rounds: 5, perRound: 6, ckAfter: []int{5}})
		r := b.rounds[2]
		flipLength(t, r.file, r.recs[1])
		damaged, _ := os.ReadFile(r.file)
		j, err := openDir(b.dir, true)
		if err != nil {
			t.Fatal(err)
		}
		cuts := j.Cuts()
		if len(cuts) == 0 {
			t.Fatal("nothing reported cut")
		}
		c := cuts[0]
		if c.Torn || c.File != r.file || c.Offset != r.off || c.Bytes != int64(len(damaged))-r.off || c.Records != 1+2*6 || c.Round != r.seq {
			t.Fatalf("cut %+v; want %s from %d, %d bytes, 13 records, round %d", c, r.file, r.off, int64(len(damaged))-r.off, r.seq)
		}
		if kept, err := os.ReadFile(c.Kept); err != nil || !bytes.Equal(kept, damaged[r.off:]) {
			t.Fatalf("the cut bytes are not kept in %q: %v", c.Kept, err)
		}
		if j.M.Repairs.Load() == 0 || j.M.CutBytes.Load() != uint64(c.Bytes) {
			t.Fatalf("metrics: repairs %d, cut bytes %d", j.M.Repairs.Load(), j.M.CutBytes.Load())
		}
		wantReplay(t, j, b.upTo(2))
		j, err = openDir(b.dir, false)
		if err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
		wantReplay(t, j, b.upTo(2))
	})
	t.Run("a middle segment missing", func(t *testing.T) {
		b := build(t, spec{rounds: 8, perRound: 6, segBytes: 600, ckAfter: []int{8}})
		os.Remove(b.segment(1))
		later := segmentFiles(t, b.dir)[1:]
		j, err := openDir(b.dir, true)
		if err != nil {
			t.Fatal(err)
		}
		missing := false
		for _, c := range j.Cuts() {
			missing = missing || c.File == b.segment(1) && c.Bytes == 0
		}
		if !missing {
			t.Fatalf("cuts %+v name no missing %s", j.Cuts(), b.segment(1))
		}
		if kept := cutFiles(t, b.dir); len(kept) != len(later) {
			t.Fatalf("kept beside %v; want the %d later segments", kept, len(later))
		}
		n := 0
		for _, r := range b.rounds {
			if r.file == b.segment(0) {
				n++
			}
		}
		wantReplay(t, j, b.upTo(n))
		if _, err := openDir(b.dir, false); err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
	})
	t.Run("the checkpoint missing", func(t *testing.T) {
		b := build(t, spec{rounds: 3, perRound: 2, ckAfter: []int{3}})
		ck := filepath.Join(b.dir, checkpointName)
		os.Remove(ck)
		j, err := openDir(b.dir, true)
		if err != nil {
			t.Fatal(err)
		}
		if c := j.Cuts(); len(c) != 1 || c[0].File != ck {
			t.Fatalf("cuts %+v; want the checkpoint's loss", c)
		}
		wantReplay(t, j, b.want)
		if _, err := openDir(b.dir, false); err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
	})
	t.Run("the newest segment missing", func(t *testing.T) {
		b := build(t, spec{rounds: 8, perRound: 6, segBytes: 600, ckAfter: []int{8}})
		os.Remove(b.last().file)
		j, err := openDir(b.dir, true)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range b.rounds {
			if r.file != b.last().file {
				n++
			}
		}
		wantReplay(t, j, b.upTo(n))
		if _, err := openDir(b.dir, false); err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
	})
}

// TestOpenBase: the segments before Base are neither checked nor read, and
// Base itself must be there, repair or not.
func TestOpenBase(t *testing.T) {
	b := build(t, spec{rounds: 8, perRound: 6, segBytes: 600, ckAfter: []int{8}})
	edit(t, b.segment(0), func(x []byte) []byte { return bytes.Repeat([]byte{0xee}, len(x)) })
	j, err := Open(Options{Dir: b.dir, Sets: 4, Base: 1})
	if err != nil {
		t.Fatalf("a bad segment before Base: %v", err)
	}
	got, n0 := 0, 0
	if err := j.Replay(From{Segment: 1}, func(Record) error { got++; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, r := range b.rounds {
		if r.file == b.segment(0) {
			n0++
		}
	}
	if want := len(b.want) - len(b.upTo(n0)); got != want {
		t.Fatalf("%d records replayed from segment 1; want %d", got, want)
	}
	if err := j.Replay(From{ID: 3, Segment: 7}, func(Record) error { return nil }); !errors.Is(err, ErrMissing) {
		t.Fatalf("a replay from a snapshot's segment that is not there: %v; want it refused", err)
	}
	os.Remove(b.segment(1))
	for _, repair := range []bool{false, true} {
		if _, err := Open(Options{Dir: b.dir, Sets: 4, Base: 1, Repair: repair}); !errors.Is(err, ErrMissing) {
			t.Fatalf("Base missing, repair %v: err %v; want it refused", repair, err)
		}
	}
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

func TestOldFormatRefused(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, segmentName(0)), []byte(segmentMagicV1+"\x00\x00\x00\x04\x00\x00\x00\x00"), 0o644)
	_, err := Open(Options{Dir: dir, Sets: 4})
	if err == nil || !strings.Contains(err.Error(), segmentMagicV1) || !strings.Contains(err.Error(), segmentName(0)) {
		t.Fatalf("err %v; want the old format named", err)
	}
}

// TestCheckpointKeepsUp: the checkpoint's goroutine follows the rounds, and
// Close leaves it at the journal's end.
func TestCheckpointKeepsUp(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, nil)
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := p.Wait(p.Append(RecTest, []byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	ck, _, err := readCheckpoint(filepath.Join(dir, checkpointName))
	if err != nil {
		t.Fatal(err)
	}
	rs := layout(t, dir)
	last := rs[len(rs)-1]
	if ck.pos != (position{seg: 0, off: last.end, seq: last.seq}) {
		t.Fatalf("checkpoint %+v after Close; want the end of round %d at %d", ck.pos, last.seq, last.end)
	}
	if j.M.Checkpoints.Load() == 0 {
		t.Fatal("no checkpoint written")
	}
}
