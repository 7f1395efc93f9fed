package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzDecode: the decoder never panics, never reads past a record's declared
// end, and whatever it accepts encodes back to the same bytes. A segment's
// walk stops at the first bad record with its offset.
func FuzzDecode(f *testing.F) {
	f.Add(AppendRecord(nil, 1, 0, nil))
	f.Add(AppendRecord(nil, 2, 7, []byte("pooled envelope 0123456789ab")))
	f.Add(AppendRecord(AppendRecord(nil, 3, 1, []byte{1, 2, 3}), 4, 2, bytes.Repeat([]byte{0xff}, 400)))
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 0, 1, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := Decode(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with %d bytes taken", err, n)
			}
		} else {
			if n > len(b) || n != Size(len(r.Payload)) {
				t.Fatalf("took %d bytes of %d for a payload of %d", n, len(b), len(r.Payload))
			}
			if again := AppendRecord(nil, r.Type, r.PID, r.Payload); !bytes.Equal(again, b[:n]) {
				t.Fatalf("decoded %+v re-encodes as %x; read from %x", r, again, b[:n])
			}
		}
		off, err := walk(b, 0, nil)
		if off > len(b) || (err == nil) != (off == len(b)) {
			t.Fatalf("walk stopped at %d of %d with %v", off, len(b), err)
		}
	})
}

// fuzzImage is a valid journal of three segments whose checkpoint (both
// slots) covers every round but the last.
type fuzzImage struct {
	names []string // sorted: the segments, then the checkpoint
	files map[string][]byte
	want  []rec
	last  int // records of the last round
}

func newFuzzImage(f *testing.F) fuzzImage {
	b := build(f, spec{rounds: 9, perRound: 4, segBytes: 480, ckAfter: []int{8}})
	img := fuzzImage{files: map[string][]byte{}, want: b.want, last: len(b.last().recs)}
	if b.last().file != b.rounds[7].file || len(segmentFiles(f, b.dir)) != 3 {
		f.Fatal("want three segments, the last two rounds in the last one")
	}
	r := b.rounds[7]
	ckb := checkpointFile(position{seg: segmentIndexOf(filepath.Base(r.file)), off: r.end, seq: r.seq}, 2)
	if err := os.WriteFile(filepath.Join(b.dir, checkpointName), ckb, 0o644); err != nil {
		f.Fatal(err)
	}
	for _, name := range append(segmentFiles(f, b.dir), checkpointName) {
		data, err := os.ReadFile(filepath.Join(b.dir, name))
		if err != nil {
			f.Fatal(err)
		}
		img.names, img.files[name] = append(img.names, name), data
	}
	return img
}

// damage writes the image to dir and applies ops, 8 bytes each: kind, file,
// offset u32, argument: flip a bit, cut short (or extend with zeros), zero
// a range, delete the file.
func (img fuzzImage) damage(t *testing.T, dir string, ops []byte) {
	for _, name := range img.names {
		if err := os.WriteFile(filepath.Join(dir, name), img.files[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k+8 <= len(ops) && k < 6*8; k += 8 {
		op := ops[k : k+8]
		path := filepath.Join(dir, img.names[int(op[1])%len(img.names)])
		b, err := os.ReadFile(path)
		if err != nil {
			continue // deleted
		}
		off := int(binary.BigEndian.Uint32(op[2:]))
		switch op[0] % 4 {
		case 0:
			if len(b) > 0 {
				b[off%len(b)] ^= 1 << (op[6] % 8)
			}
		case 1:
			n := off % (len(b) + 4097)
			b = append(b, make([]byte, max(0, n-len(b)))...)[:n]
		case 2:
			if len(b) > 0 {
				from := off % len(b)
				clear(b[from:min(len(b), from+int(op[6])*4+1)])
			}
		case 3:
			os.Remove(path)
			continue
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzOpen: a valid journal damaged (bits flipped, files cut short or
// extended by zeros, ranges zeroed, files deleted) never makes Open panic.
// When a start takes it, every record before the last round replays
// unchanged and the last round whole or not at all. With Repair it starts
// on a prefix of the records (or refuses only a missing first segment), and
// the next start takes the repaired journal as whole.
func FuzzOpen(f *testing.F) {
	img := newFuzzImage(f)
	f.Add([]byte{})
	f.Add([]byte{0, 2, 0, 0, 3, 0, 7, 0})                          // a bit of the last segment
	f.Add([]byte{0, 2, 0, 0, 0, 90, 7, 0})                         // ... in its first round
	f.Add([]byte{1, 2, 0, 0, 2, 0, 0, 0})                          // the last segment cut short
	f.Add([]byte{1, 2, 0, 0, 0xff, 0xff, 0, 0})                    // ... or extended
	f.Add([]byte{2, 1, 0, 0, 0, 60, 20, 0})                        // zeros in the middle one
	f.Add([]byte{3, 2, 0, 0, 0, 0, 0, 0})                          // the last segment deleted
	f.Add([]byte{3, 3, 0, 0, 0, 0, 0, 0})                          // the checkpoint deleted
	f.Add([]byte{0, 3, 0, 0, 0, 20, 1, 0, 0, 2, 0, 0, 3, 0, 7, 0}) // a slot torn, a bit of the last round
	f.Fuzz(func(t *testing.T, ops []byte) {
		dir := t.TempDir()
		img.damage(t, dir, ops)
		if j, err := openDir(dir, false); err == nil {
			got := replayAll(t, j)
			if !slices.Equal(got, img.want) && !slices.Equal(got, img.want[:len(img.want)-img.last]) {
				t.Fatalf("started on %d records; want %d, or %d without the last round", len(got), len(img.want), len(img.want)-img.last)
			}
		}
		dir = t.TempDir()
		img.damage(t, dir, ops)
		j, err := openDir(dir, true)
		if err != nil {
			if !errors.Is(err, ErrMissing) && !strings.Contains(err.Error(), segmentMagicV1) {
				t.Fatalf("repair refused: %v", err)
			}
			return
		}
		got := replayAll(t, j)
		if len(got) > len(img.want) || !slices.Equal(got, img.want[:len(got)]) {
			t.Fatalf("repaired to %d records, not a prefix of the %d written", len(got), len(img.want))
		}
		j, err = openDir(dir, false)
		if err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
		if again := replayAll(t, j); !slices.Equal(again, got) {
			t.Fatalf("the start after the repair replayed %d records; the repaired start %d", len(again), len(got))
		}
	})
}

func replayAll(t *testing.T, j *Journal) []rec {
	t.Helper()
	var got []rec
	if err := j.Replay(From{}, func(r Record) error {
		got = append(got, rec{r.Type, r.PID, string(r.Payload)})
		return nil
	}); err != nil {
		t.Fatalf("Replay after a start that took the journal: %v", err)
	}
	return got
}
