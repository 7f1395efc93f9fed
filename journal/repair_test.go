package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

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
