package journal

import (
	"path/filepath"
	"testing"
)

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
