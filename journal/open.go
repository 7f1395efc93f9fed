package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A segment (NNNN.journal, 16 hex digits) starts with its header, then
// rounds:
//
//	magic    "HBJRNL02"
//	sets     u32 BE  envelope ids name their SET: a journal of another count is refused
//	index    u64 BE  the segment's own index, as in its name
//	prevLen  u64 BE  the previous segment's final size (0: none)
//	prevSeq  u64 BE  the last round before this segment (0: none)
//	crc      u32 BE  CRC-32C of the 36 bytes before
//
// The previous segment's length and last round are in its successor, so
// that an older segment shortened or replaced is caught by the next one.
const (
	segmentSuffix    = ".journal"
	segmentHeaderLen = 40
	segmentMagic     = "HBJRNL02"
	segmentMagicV1   = "HBJRNL01" // records without rounds: no longer read
)

type segHeader struct {
	sets    uint32
	index   uint64
	prevLen int64
	prevSeq uint64
}

func (h segHeader) bytes() []byte {
	b := make([]byte, segmentHeaderLen)
	copy(b, segmentMagic)
	binary.BigEndian.PutUint32(b[8:], h.sets)
	binary.BigEndian.PutUint64(b[12:], h.index)
	binary.BigEndian.PutUint64(b[20:], uint64(h.prevLen))
	binary.BigEndian.PutUint64(b[28:], h.prevSeq)
	binary.BigEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	return b
}

var (
	errSegmentHeader = errors.New("bad segment header")
	// ErrMissing: a segment or the checkpoint that the journal needs is not
	// there.
	ErrMissing = errors.New("missing")
	// ErrShortened: a segment ends before what its successor or the
	// checkpoint says it held.
	ErrShortened = errors.New("shortened")
)

func parseSegHeader(b []byte) (segHeader, error) {
	if len(b) < segmentHeaderLen {
		return segHeader{}, fmt.Errorf("%w: %d bytes of %d", errSegmentHeader, len(b), segmentHeaderLen)
	}
	if string(b[:8]) != segmentMagic || crc32.Checksum(b[:36], castagnoli) != binary.BigEndian.Uint32(b[36:]) {
		return segHeader{}, errSegmentHeader
	}
	return segHeader{sets: binary.BigEndian.Uint32(b[8:]), index: binary.BigEndian.Uint64(b[12:]),
		prevLen: int64(binary.BigEndian.Uint64(b[20:]) & (1<<62 - 1)), prevSeq: binary.BigEndian.Uint64(b[28:])}, nil
}

// segment is a segment as Open found it.
type segment struct {
	name    string
	index   uint64
	size    int64  // its last round ends here
	prevSeq uint64 // the round before its first
	last    uint64 // its last round (prevSeq when it holds none)
}

// Cut is a part of the journal that Open took out: a torn tail (the end of
// the last round a crash interrupted, never synced, so no answer told of
// it) or, with Options.Repair, what followed corruption or a missing file.
type Cut struct {
	File    string // the segment cut (or the file found missing or wrong)
	Offset  int64  // where the cut starts
	Bytes   int64  // bytes cut
	Records int    // records that decode in them: a lower bound when a round is damaged inside
	Round   uint64 // the first round cut (0: none)
	Torn    bool   // a torn tail; false: a repair
	Kept    string // the file the cut bytes are in now, beside the journal; "" when there were none or only zeros
	Why     string // what was wrong there
}

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

// Open makes Dir if needed and checks every segment in it (from Base on),
// against each other and against the checkpoint. A bad round is cut as a
// torn tail only where a crash can have torn it: in the newest segment, at
// or after the checkpointed position, with no valid round after it. Anything
// else stops the start with a *CorruptError naming the file and offset
// (Options.Repair cuts it instead); so does a segment or the checkpoint
// missing, or a segment shorter than its successor or the checkpoint say.
// Cuts lists what was cut. Replay then reads what is there; Start begins a
// new segment after it.
func Open(o Options) (*Journal, error) {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.RingBytes <= 0 {
		o.RingBytes = defaultRingBytes
	}
	if o.RingBytes&(o.RingBytes-1) != 0 || o.RingBytes < 1024 {
		return nil, fmt.Errorf("journal: ring of %d bytes: want a power of two ≥ 1024", o.RingBytes)
	}
	if o.Create == nil {
		o.Create = createFile
	}
	if o.RoundEvery == 0 {
		o.RoundEvery = DefaultRoundEvery
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &Journal{o: o, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		rotReq: make(chan chan rotated), ckWake: make(chan struct{}, 1), ckDone: make(chan struct{}),
		round: make([]byte, RoundHeaderLen, 64<<10)}
	j.cond = sync.NewCond(&j.mu)
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

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

// newCheckpoint writes a new checkpoint file (temporary name, synced,
// renamed, directory synced).
func (j *Journal) newCheckpoint(pos position, gen uint64) error {
	if err := WriteFile(j.o.Dir, checkpointName, checkpointFile(pos, gen)); err != nil {
		return fmt.Errorf("journal: checkpoint: %w", err)
	}
	j.ckGen, j.ckSlot, j.ckPos, j.dpos = gen, int(gen%2), pos, pos
	return nil
}

func oldFormat(dir string, names []string) error {
	for _, name := range names {
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		b := make([]byte, 8)
		n, _ := f.Read(b)
		f.Close()
		if string(b[:n]) == segmentMagicV1 {
			return fmt.Errorf("journal: %s is in the journal format before rounds (%s), which this build does not read: "+
				"run the build that wrote it, or move the data directory away to start empty", path, segmentMagicV1)
		}
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

func (j *Journal) lose(c Cut) {
	j.cuts = append(j.cuts, c)
	if c.Torn {
		j.M.TornCuts.Add(1)
	} else {
		j.M.Repairs.Add(1)
	}
	j.M.CutBytes.Add(uint64(c.Bytes))
	j.M.CutRecords.Add(uint64(c.Records))
}

// cutTorn cuts the newest segment's torn tail: its bytes kept beside it
// unless they are all zeros, the file cut (removed when its header was
// torn) and synced.
func (j *Journal) cutTorn(name string, t *tornTail) error {
	path := filepath.Join(j.o.Dir, name)
	c := Cut{File: path, Offset: t.off, Bytes: int64(len(t.b)) - t.off, Round: t.round, Torn: true, Why: t.why.Error()}
	if len(t.b) > segmentHeaderLen {
		c.Records = countRecords(t.b, max(int(t.off), segmentHeaderLen))
	}
	if slices.ContainsFunc(t.b[t.off:], func(c byte) bool { return c != 0 }) {
		kept, err := keepAside(path, t.b[t.off:])
		if err != nil {
			return err
		}
		c.Kept = kept
	}
	var err error
	if t.off == 0 {
		err = os.Remove(path)
	} else {
		err = truncate(path, t.off)
	}
	if err != nil {
		return fmt.Errorf("journal: cutting the torn tail of %s: %w", path, err)
	}
	if err := SyncDir(j.o.Dir); err != nil {
		return err
	}
	j.lose(c)
	return nil
}

// repairCut cuts names[p.at] at p.off and moves every later segment aside,
// keeping every byte in files beside the journal; it returns the segments
// left.
func (j *Journal) repairCut(names []string, p *problem) ([]string, error) {
	dir := j.o.Dir
	var ce *CorruptError
	why := p.err.Error()
	if errors.As(p.err, &ce) {
		why = ce.Err.Error()
		if errors.Is(ce.Err, ErrMissing) { // nothing of it to keep: what it held is lost
			j.lose(Cut{File: ce.File, Offset: ce.Offset, Round: p.round, Why: why})
		}
	}
	for i := p.at; i < len(names); i++ {
		path := filepath.Join(dir, names[i])
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		c := Cut{File: path, Bytes: int64(len(b)), Round: p.round, Why: why}
		if i > p.at {
			c.Why = "follows the cut at " + names[p.at]
			c.Round = 0
			if h, err := parseSegHeader(b); err == nil {
				c.Round = h.prevSeq + 1
			}
		}
		if i == p.at && p.off > 0 {
			c.Offset, c.Bytes = p.off, int64(len(b))-p.off
			if c.Kept, err = keepAside(path, b[p.off:]); err != nil {
				return nil, err
			}
			if err := truncate(path, p.off); err != nil {
				return nil, fmt.Errorf("journal: repairing %s: %w", path, err)
			}
		} else {
			if c.Kept, err = moveAside(path); err != nil {
				return nil, err
			}
		}
		if int(c.Offset) < len(b) {
			c.Records = countRecords(b, max(int(c.Offset), segmentHeaderLen))
		}
		j.lose(c)
	}
	if err := SyncDir(dir); err != nil {
		return nil, err
	}
	if p.off > 0 {
		return names[:p.at+1], nil
	}
	return names[:p.at], nil
}

// cutName is a new name beside path for what is cut from it.
func cutName(path string) string {
	name := fmt.Sprintf("%s.cut-%d", path, time.Now().Unix())
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("%s.cut-%d-%d", path, time.Now().Unix(), i)
	}
}

// keepAside writes b, cut from path, to a new file beside it, synced.
func keepAside(path string, b []byte) (string, error) {
	name := cutName(path)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return "", fmt.Errorf("journal: keeping what is cut from %s: %w", path, err)
	}
	return name, nil
}

// moveAside renames a segment out of the journal, beside it.
func moveAside(path string) (string, error) {
	name := cutName(path)
	if err := os.Rename(path, name); err != nil {
		return "", fmt.Errorf("journal: moving %s aside: %w", path, err)
	}
	return name, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	if err := (osFile{f}).Sync(); err != nil {
		return fmt.Errorf("journal: syncing %s: %w", path, err)
	}
	return nil
}

func truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// listSegments lists the segments from index from on, oldest first.
func listSegments(dir string, from uint64) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var names []string
	for _, e := range ents {
		if i, ok := segmentIndex(e.Name()); ok && i >= from && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names) // fixed-width hex: lexical is numeric order
	return names, nil
}

func segmentName(i uint64) string { return fmt.Sprintf("%016x%s", i, segmentSuffix) }

func segmentIndex(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	i, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || segmentName(i) != name {
		return 0, false
	}
	return i, true
}

func segmentIndexOf(name string) uint64 {
	i, _ := segmentIndex(name)
	return i
}
