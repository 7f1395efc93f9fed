package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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

func TestOtherSetsRefused(t *testing.T) {
	dir := t.TempDir()
	write(t, open(t, dir, nil), 1, 3)
	_, err := Open(Options{Dir: dir, Sets: 8})
	if err == nil || !strings.Contains(err.Error(), "-sets 4") {
		t.Fatalf("err %v; want a refusal naming -sets 4", err)
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
