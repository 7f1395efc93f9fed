package journal

import (
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
