package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RecMark is the record type reserved for snapshot marks (Producer.Mark).
const RecMark uint8 = 0xff

// Mark appends a snapshot mark: the producer's state as of this point is in
// snapshot id, so a replay from that snapshot skips the producer's records
// up to here. It returns the mark's position: the snapshot may be kept once
// every producer's mark is durable.
func (p *Producer) Mark(id uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return p.Append(RecMark, b[:])
}

// From is where a replay starts: after snapshot ID, whose marks are in
// segment Segment or later; the zero From replays everything.
type From struct {
	ID      uint64
	Segment uint64
	// Marked are the producers whose state the snapshot holds: the replay
	// refuses a journal lacking one's mark, or every later record of it
	// would be skipped (under Options.Repair it marks it again instead).
	Marked []uint16
}

// Replay hands to fn, in the order they were written, the records of the
// segments found at Open that a state restored from snapshot from lacks:
// those of segments from from.Segment on that follow their producer's mark
// of snapshot from.ID (all of them for the zero From). The first segment it
// reads must be from.Segment itself, or it would replay onto older state. It
// stops at fn's first error. A producer's records come in the order it
// appended them.
func (j *Journal) Replay(from From, fn func(Record) error) error {
	if j.o.Sink != nil {
		return errSink
	}
	marked := map[uint16]bool{}
	inner := fn
	fn = func(r Record) error {
		if from.ID == 0 || marked[r.PID] {
			if r.Type == RecMark {
				return nil // of another snapshot: the journal's own, not the caller's
			}
			return inner(r)
		}
		if r.Type == RecMark && len(r.Payload) == 8 && binary.BigEndian.Uint64(r.Payload) == from.ID {
			marked[r.PID] = true
		}
		return nil
	}
	i := 0
	for i < len(j.segs) && j.segs[i].index < from.Segment {
		i++ // older than the snapshot: every record in it is in the snapshot's state
	}
	if (from.ID != 0 || len(j.segs) > 0) && (i == len(j.segs) || j.segs[i].index != from.Segment) {
		oldest := "none"
		if i < len(j.segs) {
			oldest = j.segs[i].name
		}
		return &CorruptError{File: filepath.Join(j.o.Dir, segmentName(from.Segment)),
			Err: fmt.Errorf("%w: the replay starts at this segment, and the oldest there from it on is %s", ErrMissing, oldest),
			Do:  "restore it (or the newest snapshot) from a copy: a start without it would serve older state"}
	}
	for _, s := range j.segs[i:] {
		path := filepath.Join(j.o.Dir, s.name)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if int64(len(b)) < s.size {
			return &CorruptError{File: path, Offset: int64(len(b)), Err: fmt.Errorf("%w since the start checked it", ErrShortened)}
		}
		b = b[:s.size]
		seq := s.prevSeq
		for off := segmentHeaderLen; off < len(b); seq++ {
			end, _, err := checkRound(b, off, seq+1, fn)
			if err != nil {
				if errors.Is(err, errRoundShort) || errors.Is(err, errRoundHeader) || errors.Is(err, errRoundSeq) ||
					errors.Is(err, errRoundCRC) || errors.Is(err, errRoundRecords) {
					return &CorruptError{File: path, Offset: int64(off), Err: fmt.Errorf("%w (since the start checked it)", err)}
				}
				return fmt.Errorf("journal: replaying %s at offset %d: %w", path, off, err)
			}
			off = end
		}
	}
	for _, pid := range from.Marked {
		if from.ID == 0 || marked[pid] {
			continue
		}
		if !j.o.Repair || int(pid) >= len(j.producers) {
			return &CorruptError{File: filepath.Join(j.o.Dir, segmentName(from.Segment)), Offset: segmentHeaderLen,
				Err: fmt.Errorf("%w: no mark of snapshot %d by producer %d from here on, so the rounds holding it were cut", ErrMissing, from.ID, pid)}
		}
		// Its records kept all precede its mark, so its state is the
		// snapshot's: marked again here, its later records replay.
		p := j.producers[pid]
		p.Mark(from.ID)
		p.Publish()
		j.remarked = append(j.remarked, pid)
	}
	return nil
}

// Remarked lists the producers whose snapshot mark a repair had cut, marked
// again by Replay.
func (j *Journal) Remarked() []uint16 { return j.remarked }
