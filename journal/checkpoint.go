package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"
)

// The checkpoint (CHECKPOINT in the journal's directory) is the last durable
// position the writer reached, so that a start tells a journal cut behind it
// (a segment deleted or shortened, a bad round it covers) from a torn tail.
// Two slots, written alternately with pwrite and fdatasync: a write torn by
// a crash leaves the other one.
//
//	slot i at offset i × checkpointSlot (never a sector or page shared):
//	magic    "HBCKPT01"
//	gen      u64 BE  one more at each write: the valid slot of the greater one is current
//	segment  u64 BE
//	offset   u64 BE  where that segment's round seq ends (its header's end: none yet)
//	seq      u64 BE  the last round durable there
//	crc      u32 BE  CRC-32C of the 40 bytes before
//
// The zero position (offset 0) promises nothing: a journal with no round yet.
const (
	checkpointName  = "CHECKPOINT"
	checkpointMagic = "HBCKPT01"
	checkpointSlot  = 4096
	checkpointLen   = 44
)

// position is where the journal is durable: segment seg holds valid rounds
// up to offset off, the last of them round seq.
type position struct {
	seg uint64
	off int64
	seq uint64
}

type checkpoint struct {
	gen  uint64
	pos  position
	slot int // where it was read
}

func encodeCheckpoint(b []byte, ck checkpoint) {
	copy(b, checkpointMagic)
	binary.BigEndian.PutUint64(b[8:], ck.gen)
	binary.BigEndian.PutUint64(b[16:], ck.pos.seg)
	binary.BigEndian.PutUint64(b[24:], uint64(ck.pos.off))
	binary.BigEndian.PutUint64(b[32:], ck.pos.seq)
	binary.BigEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
}

func decodeCheckpoint(b []byte) (checkpoint, bool) {
	if len(b) < checkpointLen || string(b[:8]) != checkpointMagic ||
		crc32.Checksum(b[:40], castagnoli) != binary.BigEndian.Uint32(b[40:]) {
		return checkpoint{}, false
	}
	off := binary.BigEndian.Uint64(b[24:])
	if off > 1<<62 {
		return checkpoint{}, false
	}
	return checkpoint{gen: binary.BigEndian.Uint64(b[8:]),
		pos: position{seg: binary.BigEndian.Uint64(b[16:]), off: int64(off), seq: binary.BigEndian.Uint64(b[32:])}}, true
}

// checkpointFile is a whole new checkpoint file: pos in both slots, the
// current one of generation gen.
func checkpointFile(pos position, gen uint64) []byte {
	b := make([]byte, checkpointSlot+checkpointLen)
	encodeCheckpoint(b[(gen-1)%2*checkpointSlot:], checkpoint{gen: gen - 1, pos: pos})
	encodeCheckpoint(b[gen%2*checkpointSlot:], checkpoint{gen: gen, pos: pos})
	return b
}

var errCheckpoint = errors.New("neither checkpoint slot is valid")

// readCheckpoint reads the checkpoint at path: found is false when there is
// none; a file of which no slot is valid is a *CorruptError.
func readCheckpoint(path string) (ck checkpoint, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return checkpoint{}, false, nil
	}
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("journal: %w", err)
	}
	ok := false
	for slot := 0; slot < 2 && slot*checkpointSlot < len(b); slot++ {
		if c, valid := decodeCheckpoint(b[slot*checkpointSlot:]); valid && (!ok || c.gen > ck.gen) {
			ck, ok = c, true
			ck.slot = slot
		}
	}
	if !ok {
		return checkpoint{}, true, &CorruptError{File: path, Err: errCheckpoint,
			Do: "restore it from a copy, or start with -journal-repair to write it anew from the segments there"}
	}
	return ck, true, nil
}

// newCheckpoint writes a new checkpoint file (temporary name, synced,
// renamed, directory synced).
func (j *Journal) newCheckpoint(pos position, gen uint64) error {
	if err := WriteFile(j.o.Dir, checkpointName, checkpointFile(pos, gen)); err != nil {
		return fmt.Errorf("journal: checkpoint: %w", err)
	}
	j.ckGen, j.ckSlot, j.ckPos, j.dpos = gen, int(gen%2), pos, pos
	return nil
}

// Checkpoint writes the durable position to the checkpoint now, if it moved
// since the last write. A snapshot calls it once its marks are durable, so
// that the checkpoint covers them before the snapshot is kept.
func (j *Journal) Checkpoint() error {
	j.ckMu.Lock()
	defer j.ckMu.Unlock()
	j.mu.Lock()
	pos := j.dpos
	j.mu.Unlock()
	if pos == j.ckPos {
		return nil
	}
	return j.putCheckpoint(pos)
}

// putCheckpoint writes pos to the slot the last write did not use; ckMu is
// held.
func (j *Journal) putCheckpoint(pos position) error {
	path := filepath.Join(j.o.Dir, checkpointName)
	if j.ckFile == nil {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("journal: checkpoint: %w", err)
		}
		j.ckFile = f
	}
	// The slot the current position is not in: a write torn by a crash
	// leaves that one.
	ck := checkpoint{gen: j.ckGen + 1, pos: pos, slot: 1 - j.ckSlot}
	encodeCheckpoint(j.ckBuf[:], ck)
	if _, err := j.ckFile.WriteAt(j.ckBuf[:], int64(ck.slot)*checkpointSlot); err != nil {
		return fmt.Errorf("journal: writing %s: %w", path, err)
	}
	if err := (osFile{j.ckFile}).Sync(); err != nil {
		return fmt.Errorf("journal: syncing %s: %w", path, err)
	}
	j.ckGen, j.ckSlot, j.ckPos = ck.gen, ck.slot, pos
	j.M.Checkpoints.Add(1)
	return nil
}

// kickCheckpoint tells the checkpoint's goroutine the durable position
// moved; it never blocks.
func (j *Journal) kickCheckpoint() {
	select {
	case j.ckWake <- struct{}{}:
	default:
	}
}

// checkpointLoop writes the checkpoint after rounds, at most every
// CheckpointEvery: on its own goroutine, so that neither the writer's round
// nor a money answer waits for its sync.
func (j *Journal) checkpointLoop() {
	defer close(j.ckDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-j.ckWake:
		case <-j.stop:
			return
		}
		if err := j.Checkpoint(); err != nil {
			j.fail(err)
			return
		}
		t.Reset(j.o.CheckpointEvery)
		select {
		case <-t.C:
		case <-j.stop:
			t.Stop()
			return
		}
	}
}
