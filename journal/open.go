package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// CorruptError names where the journal is not whole and the start stops:
// the file, the offset, what is wrong there and what to do. It is never a
// torn tail, which a start cuts by itself.
type CorruptError struct {
	File   string
	Offset int64
	Err    error
	Do     string // what the operator can do; "" for the usual advice
}

func (e *CorruptError) Error() string {
	do := e.Do
	if do == "" {
		do = "restore the file from a copy, or start with -journal-repair: it cuts the journal there and keeps what it cut in files beside it"
	}
	return fmt.Sprintf("journal: %s, offset %d: %v: %s", e.File, e.Offset, e.Err, do)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// What a CorruptError wraps when a file is not there or not whole.
var (
	// ErrMissing: a segment or the checkpoint that the journal needs is not
	// there.
	ErrMissing = errors.New("missing")
	// ErrShortened: a segment ends before what its successor or the
	// checkpoint says it held.
	ErrShortened = errors.New("shortened")
)

// problem is where the journal stops being whole.
type problem struct {
	err   error // a *CorruptError, or a plain one when fatal
	fatal bool  // no repair mends it
	ck    bool  // the checkpoint disagrees: a repair sets it aside
	at    int   // else a repair cuts names[at] at off and moves every later segment aside
	off   int64
	round uint64 // the round expected at the cut
}

// tornTail is the bad end of the newest segment that a crash explains.
type tornTail struct {
	at    int
	off   int64
	b     []byte // the segment's bytes
	round uint64
	why   error
}

// open checks what is on disk, as Open tells, cutting a torn tail (and with
// Repair what is damaged), and sets the journal where it ends: the writer's
// next segment and round, the durable position and the checkpoint.
func (j *Journal) open() error {
	dir, ckPath := j.o.Dir, filepath.Join(j.o.Dir, checkpointName)
	names, err := listSegments(dir, j.o.Base)
	if err != nil {
		return err
	}
	ck, found, ckErr := readCheckpoint(ckPath)
	if ckErr != nil && !errors.As(ckErr, new(*CorruptError)) {
		return ckErr
	}
	if !found && len(names) == 0 && j.o.Base == 0 {
		// A new journal: its checkpoint exists before its first segment, so
		// that a directory of segments without one is known for damaged.
		return j.newCheckpoint(position{}, 1)
	}
	if err := oldFormat(dir, names); err != nil {
		return err
	}
	var ckp *checkpoint
	if found && ckErr == nil {
		ckp = &ck
	} else if !j.o.Repair {
		if ckErr != nil {
			return ckErr
		}
		return &CorruptError{File: ckPath, Err: ErrMissing,
			Do: "the directory holds journal segments, so it had a checkpoint: restore it from a copy, or start with -journal-repair to write it anew from the segments there"}
	} else {
		why := "missing"
		if ckErr != nil {
			why = ckErr.Error()
		}
		j.lose(Cut{File: ckPath, Why: why + "; written anew from the segments there: a cut after its position cannot be told"})
	}
	var segs []segment
	for tries := 0; ; tries++ {
		var torn *tornTail
		var prob *problem
		segs, torn, prob = j.scan(names, ckp)
		if prob == nil {
			if torn != nil {
				if err := j.cutTorn(names[torn.at], torn); err != nil {
					return err
				}
			}
			break
		}
		if !j.o.Repair || prob.fatal || tries > 2*len(names)+3 {
			return prob.err
		}
		var ce *CorruptError
		if !prob.ck && prob.at == 0 && prob.off == 0 && j.o.Base != 0 && errors.As(prob.err, &ce) {
			ce.Do = "restore it from a copy: it is the newest snapshot's segment, which a repair cannot do without"
			return ce
		}
		if prob.ck {
			j.lose(Cut{File: ckPath, Why: prob.err.Error() + "; set aside and written anew at the journal's end"})
			ckp = nil
			continue
		}
		if names, err = j.repairCut(names, prob); err != nil {
			return err
		}
	}
	end := position{}
	if n := len(segs); n > 0 {
		s := segs[n-1]
		// What a start after kill -9 read may still be only in the page
		// cache: synced before the checkpoint or a successor names it.
		if err := syncFile(filepath.Join(dir, s.name)); err != nil {
			return err
		}
		end = position{seg: s.index, off: s.size, seq: s.last}
		j.segIndex, j.segBytes, j.seq = s.index+1, s.size, s.last
	}
	j.segs, j.dpos = segs, end
	if ckp == nil {
		return j.newCheckpoint(end, 1)
	}
	j.ckGen, j.ckSlot, j.ckPos = ckp.gen, ckp.slot, ckp.pos
	if end != ckp.pos {
		j.ckMu.Lock()
		defer j.ckMu.Unlock()
		return j.putCheckpoint(end)
	}
	return nil
}

// scan checks the segments names against each other and the checkpoint (nil:
// none to check against). It returns the segments, the newest one's torn
// tail if any, or the first problem.
func (j *Journal) scan(names []string, ck *checkpoint) ([]segment, *tornTail, *problem) {
	dir, base := j.o.Dir, j.o.Base
	path := func(i uint64) string { return filepath.Join(dir, segmentName(i)) }
	if ck != nil && ck.pos.off == 0 {
		if base != 0 {
			return nil, nil, &problem{ck: true, err: &CorruptError{File: filepath.Join(dir, checkpointName), Err: errors.New("it names no round, but a snapshot needs segment " + segmentName(base)),
				Do: "restore the checkpoint from a copy, or start with -journal-repair"}}
		}
		ck = nil // promises nothing
	}
	if len(names) == 0 || segmentIndexOf(names[0]) != base {
		if base == 0 && len(names) == 0 {
			if ck == nil {
				return nil, nil, nil // no round yet
			}
			return nil, nil, &problem{ck: true, err: &CorruptError{File: path(ck.pos.seg), Err: ErrMissing,
				Do: fmt.Sprintf("the checkpoint says its rounds up to %d were durable: restore it from a copy, or start with -journal-repair to start without them", ck.pos.seq)}}
		}
		oldest := "none"
		if len(names) > 0 {
			oldest = names[0]
		}
		why := fmt.Errorf("%w: without a snapshot the journal starts at segment %s, and the oldest there is %s "+
			"(the segments before a snapshot's are removed once it is durable: a snapshot is missing)", ErrMissing, segmentName(0), oldest)
		if base != 0 {
			why = fmt.Errorf("%w: the newest snapshot's replay starts at segment %s, and the oldest there is %s", ErrMissing, segmentName(base), oldest)
		}
		return nil, nil, &problem{fatal: true, err: &CorruptError{File: path(base), Err: why,
			Do: "restore the missing files from a copy: a start without them would serve older state"}}
	}
	first, newest := segmentIndexOf(names[0]), segmentIndexOf(names[len(names)-1])
	if ck != nil && ck.pos.seg > newest {
		return nil, nil, &problem{ck: true, err: &CorruptError{File: path(ck.pos.seg), Err: ErrMissing,
			Do: fmt.Sprintf("the checkpoint says its rounds up to %d were durable: restore it from a copy, or start with -journal-repair to start without them", ck.pos.seq)}}
	}
	if ck != nil && ck.pos.seg < first {
		return nil, nil, &problem{ck: true, err: &CorruptError{File: filepath.Join(dir, checkpointName),
			Err: fmt.Errorf("it names segment %s, before the oldest one checked, %s", segmentName(ck.pos.seg), names[0]),
			Do:  "restore the checkpoint or the segment from a copy, or start with -journal-repair"}}
	}
	segs := make([]segment, 0, len(names))
	var torn *tornTail
	for i, name := range names {
		idx, p, last := segmentIndexOf(name), filepath.Join(dir, name), i == len(names)-1
		if i > 0 && idx != segs[i-1].index+1 {
			return nil, nil, &problem{at: i, round: segs[i-1].last + 1, err: &CorruptError{File: path(segs[i-1].index + 1),
				Err: fmt.Errorf("%w: between %s and %s", ErrMissing, names[i-1], name)}}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, &problem{fatal: true, err: fmt.Errorf("journal: %w", err)}
		}
		var prevLast uint64
		if i > 0 {
			prevLast = segs[i-1].last
		}
		// after: a bad round at off can be a torn tail as far as the
		// checkpoint knows.
		after := func(off int64) bool { return ck == nil || ck.pos.seg < idx || ck.pos.seg == idx && off >= ck.pos.off }
		h, herr := parseSegHeader(b)
		if herr == nil && h.sets != uint32(j.o.Sets) {
			return nil, nil, &problem{fatal: true, err: fmt.Errorf("journal: %s was written by a server of %d SETs, this one has %d: start it with -sets %d",
				p, h.sets, j.o.Sets, h.sets)}
		}
		if herr == nil && h.index != idx {
			herr = fmt.Errorf("%w: it says it is segment %d", errSegmentHeader, h.index)
		}
		if herr != nil {
			if last && after(0) && !roundAfter(b, 0, prevLast) {
				torn = &tornTail{at: i, b: b, round: prevLast + 1, why: herr}
				break
			}
			return nil, nil, &problem{at: i, round: prevLast + 1, err: &CorruptError{File: p, Err: herr}}
		}
		if i > 0 && (h.prevLen != segs[i-1].size || h.prevSeq != prevLast) {
			pv := segs[i-1]
			return nil, nil, &problem{at: i, round: prevLast + 1, err: &CorruptError{File: filepath.Join(dir, pv.name), Offset: pv.size,
				Err: fmt.Errorf("%w: it is %d bytes, its last round %d, but %s's header says it was %d bytes, its last round %d",
					ErrShortened, pv.size, pv.last, name, h.prevLen, h.prevSeq)}}
		}
		if idx == 0 && (h.prevLen != 0 || h.prevSeq != 0) {
			return nil, nil, &problem{at: i, err: &CorruptError{File: p, Err: fmt.Errorf("%w: segment 0 names a segment before it", errSegmentHeader)}}
		}
		s := segment{name: name, index: idx, prevSeq: h.prevSeq, last: h.prevSeq}
		ckSeen := ck == nil || ck.pos.seg != idx
		atCk := func(off int64) *problem { // a round boundary
			if ckSeen || off < ck.pos.off {
				return nil
			}
			if off == ck.pos.off && s.last == ck.pos.seq {
				ckSeen = true
				return nil
			}
			return &problem{ck: true, err: &CorruptError{File: p, Offset: off,
				Err: fmt.Errorf("the checkpoint says round %d ends at offset %d, and round %d ends here", ck.pos.seq, ck.pos.off, s.last),
				Do:  "restore the segment or the checkpoint from a copy, or start with -journal-repair"}}
		}
		off := int64(segmentHeaderLen)
		if pr := atCk(off); pr != nil {
			return nil, nil, pr
		}
		for off < int64(len(b)) {
			end, _, rerr := checkRound(b, int(off), s.last+1, nil)
			if rerr != nil {
				if last && after(off) && !roundAfter(b, int(off)+1, s.last) {
					torn = &tornTail{at: i, off: off, b: b, round: s.last + 1, why: rerr}
					break
				}
				why := "valid rounds follow it, so it is not a torn tail"
				switch {
				case !after(off):
					why = "the checkpoint says it was durable"
				case !last:
					why = "a later segment follows, so it is not a torn tail"
				}
				return nil, nil, &problem{at: i, off: off, round: s.last + 1, err: &CorruptError{File: p, Offset: off,
					Err: fmt.Errorf("%w (%s)", rerr, why)}}
			}
			s.last++
			off = int64(end)
			if pr := atCk(off); pr != nil {
				return nil, nil, pr
			}
		}
		s.size = off
		if !ckSeen {
			return nil, nil, &problem{ck: true, err: &CorruptError{File: p, Offset: off,
				Err: fmt.Errorf("%w: its rounds end here with round %d, and the checkpoint says round %d, ending at offset %d, was durable",
					ErrShortened, s.last, ck.pos.seq, ck.pos.off),
				Do: "restore the segment from a copy, or start with -journal-repair to start without what it lost"}}
		}
		segs = append(segs, s)
	}
	return segs, torn, nil
}
