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

// segHeader is a segment's header, as above.
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

var errSegmentHeader = errors.New("bad segment header")

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

// segmentName is segment i's file name.
func segmentName(i uint64) string { return fmt.Sprintf("%016x%s", i, segmentSuffix) }

// segmentIndex reads the index in a segment's file name: false for any other
// file.
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

// segmentIndexOf is the index of a name listSegments returned.
func segmentIndexOf(name string) uint64 {
	i, _ := segmentIndex(name)
	return i
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

// oldFormat refuses segments of the format before rounds: read as this one,
// they would be taken for damage.
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

// RemoveBefore removes the segments before index segment: a durable
// snapshot holds their state. The checkpoint is brought up to date first,
// so that it never names a segment removed; they go oldest first, the
// directory synced after each, so that a crash leaves no gap.
func (j *Journal) RemoveBefore(segment uint64) error {
	if j.o.Sink != nil {
		return errSink
	}
	if err := j.Checkpoint(); err != nil {
		return err
	}
	j.ckMu.Lock()
	at := j.ckPos
	j.ckMu.Unlock()
	if at.off != 0 && at.seg < segment {
		return fmt.Errorf("journal: not removing the segments before %s: the checkpoint is at %s", segmentName(segment), segmentName(at.seg))
	}
	names, err := listSegments(j.o.Dir, 0)
	if err != nil {
		return err
	}
	for _, name := range names {
		if segmentIndexOf(name) >= segment {
			break
		}
		if err := os.Remove(filepath.Join(j.o.Dir, name)); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if err := SyncDir(j.o.Dir); err != nil {
			return err
		}
	}
	return nil
}
