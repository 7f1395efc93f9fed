package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// File is what the writer needs of a segment file; Options.Create may return
// one that fails on purpose.
type File interface {
	Write(p []byte) (int, error)
	Sync() error // data durable on disk (fdatasync)
	Close() error
}

// Options configure a journal.
type Options struct {
	Dir  string
	Sets int // written in every segment: a journal of another number of SETs is refused, its envelope ids name SETs
	// SegmentBytes: the writer starts a new segment once its current one is
	// past this (default 64 MiB), so that a snapshot frees whole files.
	SegmentBytes int64
	// RingBytes: each producer's ring, a power of two (default 128 KiB:
	// ~5,000 SHAKE records, a round's worth of one SET at a million a second).
	RingBytes int
	// Create opens a new segment file for appending; nil: the real file.
	Create func(path string) (File, error)
	// OnDurable runs on the writer's goroutine after each round that made
	// records durable: the server ticks the SETs whose egress holds answers.
	OnDurable func()
	// OnFail runs once, on the writer's goroutine, when a write or sync fails.
	OnFail func(error)
	// RoundEvery is the least time from the start of one round to the start
	// of the next (default DefaultRoundEvery; negative: none, a round starts
	// as soon as the last one is durable). An fdatasync costs about the same
	// CPU whatever it holds (~70 µs here), so under a light load rounds of a
	// few records each would cost more than the answers they hold; a record
	// waits at most this much longer for its round.
	RoundEvery time.Duration
}

// DefaultRoundEvery is Options.RoundEvery's default: at most 1,000 rounds
// (fdatasyncs) a second.
const DefaultRoundEvery = time.Millisecond

const (
	defaultSegmentBytes = 64 << 20
	defaultRingBytes    = 128 << 10
	segmentSuffix       = ".journal"
	segmentHeaderLen    = 16
	segmentMagic        = "HBJRNL01"
)

// Journal is the write-ahead journal: producers append records to their
// rings, one writer goroutine gathers every producer's published records into
// one write and one fdatasync per round.
type Journal struct {
	o         Options
	producers []*Producer
	marks     []uint64

	seg      File
	segIndex uint64
	segBytes int64
	segments []string // existing at Open, oldest first, for Replay
	round    []byte

	roundStart time.Time   // when the last round began gathering
	pacer      *time.Timer // waits out RoundEvery after a round

	idle   atomic.Bool
	wake   chan struct{}
	rotReq chan chan rotated
	stop   chan struct{}
	done   chan struct{}

	failed atomic.Bool
	mu     sync.Mutex
	cond   *sync.Cond
	err    error

	M Metrics
}

// Metrics are the writer's counters; any goroutine may read them.
type Metrics struct {
	Records, Bytes, Rounds, Fsyncs atomic.Uint64
	FsyncNs                        atomic.Uint64               // sum of fsync latencies
	FsyncBuckets                   [FsyncBuckets]atomic.Uint64 // FsyncBucketUs(i) µs and less (the last: more)
	Segments                       atomic.Uint64               // segment files created
}

// FsyncBuckets is the fsync latency histogram's bucket count.
const FsyncBuckets = 16

// FsyncBucketUs is the upper bound of fsync bucket i in µs: 16 µs doubling,
// up to ~0.5 s.
func FsyncBucketUs(i int) uint64 { return 16 << i }

func (m *Metrics) observe(d time.Duration) {
	m.Fsyncs.Add(1)
	m.FsyncNs.Add(uint64(d))
	us := uint64(d / time.Microsecond)
	i := 0
	for i < FsyncBuckets-1 && us > FsyncBucketUs(i) {
		i++
	}
	m.FsyncBuckets[i].Add(1)
}

// Open makes Dir if needed and checks every segment in it: a record cut
// short or unreadable at the end of the last segment (a round torn by a
// crash) is cut off; anything unreadable before that stops the start with a
// *CorruptError naming the file and offset. Replay then reads what is there;
// Start begins a new segment after it.
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
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &Journal{o: o, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		rotReq: make(chan chan rotated)}
	j.cond = sync.NewCond(&j.mu)
	names, err := listSegments(o.Dir)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		last := i == len(names)-1
		keep, err := j.check(filepath.Join(o.Dir, name), last)
		if err != nil {
			return nil, err
		}
		if keep {
			j.segments = append(j.segments, name)
		}
		idx, _ := segmentIndex(name)
		j.segIndex = idx + 1
	}
	return j, nil
}

func listSegments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var names []string
	for _, e := range ents {
		if _, ok := segmentIndex(e.Name()); ok && e.Type().IsRegular() {
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
	var i uint64
	if _, err := fmt.Sscanf(hex, "%016x", &i); err != nil {
		return 0, false
	}
	return i, true
}

func segmentHeader(sets int) []byte {
	h := append([]byte(segmentMagic), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(h[8:], uint32(sets))
	return binary.BigEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

// check validates one segment; keep is false when it was removed (a last
// segment torn inside its header holds nothing).
func (j *Journal) check(path string, last bool) (keep bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("journal: %w", err)
	}
	if len(b) < segmentHeaderLen {
		if last {
			return false, os.Remove(path)
		}
		return false, &CorruptError{File: path, Offset: 0, Err: ErrShort}
	}
	if !bytes.Equal(b[:segmentHeaderLen], segmentHeader(j.o.Sets)) {
		if string(b[:8]) == segmentMagic && crc32.Checksum(b[:12], castagnoli) == binary.BigEndian.Uint32(b[12:]) {
			return false, fmt.Errorf("journal: %s was written by a server of %d SETs, this one has %d: start it with -sets %d",
				path, binary.BigEndian.Uint32(b[8:]), j.o.Sets, binary.BigEndian.Uint32(b[8:]))
		}
		return false, &CorruptError{File: path, Offset: 0, Err: errors.New("bad segment header")}
	}
	off, err := walk(b, segmentHeaderLen, nil)
	if err == nil {
		return true, nil
	}
	if !last || !torn(b, off, err) {
		return false, &CorruptError{File: path, Offset: int64(off), Err: err}
	}
	if err := truncate(path, int64(off)); err != nil {
		return false, err
	}
	return true, nil
}

// walk decodes the records of b from off, handing each to fn (if not nil),
// and returns the offset where it stopped with the reason.
func walk(b []byte, off int, fn func(Record) error) (int, error) {
	for off < len(b) {
		r, n, err := Decode(b[off:])
		if err != nil {
			return off, err
		}
		if fn != nil {
			if err := fn(r); err != nil {
				return off, err
			}
		}
		off += n
	}
	return off, nil
}

// torn tells whether the bad record at off is the tail of a round the crash
// cut: it runs to the end of the file (cut short, or its last bytes never
// reached the disk), or all that follows it is zeros (the file system had
// extended the file before the data landed). A round is one write, so a crash
// can only damage its end; a bad record with others after it is corruption.
func torn(b []byte, off int, err error) bool {
	if errors.Is(err, ErrShort) {
		return true
	}
	if n := int(binary.BigEndian.Uint32(b[off:])); errors.Is(err, ErrCRC) && off+HeaderLen+n == len(b) {
		return true
	}
	for _, c := range b[off:] {
		if c != 0 {
			return false
		}
	}
	return true
}

func truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("journal: cutting the torn tail: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("journal: cutting the torn tail: %w", err)
	}
	return f.Sync()
}

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
}

// Replay hands to fn, in the order they were written, the records of the
// segments found at Open that a state restored from snapshot from lacks:
// those of segments from from.Segment on that follow their producer's mark
// of snapshot from.ID (all of them for the zero From). It stops at fn's
// first error. A producer's records come in the order it appended them.
func (j *Journal) Replay(from From, fn func(Record) error) error {
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
	for _, name := range j.segments {
		if idx, _ := segmentIndex(name); idx < from.Segment {
			continue // older than the snapshot: every record in it is in the snapshot's state
		}
		path := filepath.Join(j.o.Dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if off, err := walk(b, segmentHeaderLen, fn); err != nil {
			var ce *CorruptError
			if errors.As(err, &ce) || errors.Is(err, ErrShort) || errors.Is(err, ErrCRC) || errors.Is(err, ErrBadSize) {
				return &CorruptError{File: path, Offset: int64(off), Err: err}
			}
			return fmt.Errorf("journal: replaying %s at offset %d: %w", path, off, err)
		}
	}
	return nil
}

// Producer registers a new producer; all are registered before Start.
func (j *Journal) Producer() *Producer {
	if len(j.producers) >= 1<<16 {
		panic("BUG: journal: more than 65,536 producers")
	}
	p := &Producer{j: j, id: uint16(len(j.producers)), buf: make([]byte, j.o.RingBytes),
		mask: uint64(j.o.RingBytes - 1), scratch: make([]byte, 0, 512)}
	j.producers = append(j.producers, p)
	j.marks = append(j.marks, 0)
	return p
}

// Start opens a new segment and starts the writer.
func (j *Journal) Start() error {
	if err := j.rotate(); err != nil {
		return err
	}
	go j.loop()
	return nil
}

// Close writes what the producers published, syncs it and stops the writer.
// The producers must have stopped appending.
func (j *Journal) Close() error {
	select {
	case <-j.stop:
	default:
		close(j.stop)
	}
	<-j.done
	var err error
	if j.seg != nil {
		err = j.seg.Close()
		j.seg = nil
	}
	return errors.Join(j.Err(), err)
}

// Failed tells whether a write or sync failed: nothing appended since will
// become durable, so no money may be handed out.
func (j *Journal) Failed() bool { return j != nil && j.failed.Load() }

// Err is the failure that stopped the journal, or nil.
func (j *Journal) Err() error {
	if j == nil || !j.failed.Load() {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Lag is the bytes published and not yet durable, over every producer.
func (j *Journal) Lag() uint64 {
	var lag uint64
	for _, p := range j.producers {
		lag += p.pub.Load() - min(p.durable.Load(), p.pub.Load())
	}
	return lag
}

func (j *Journal) kick() {
	if j.idle.Load() && j.idle.CompareAndSwap(true, false) {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

func (j *Journal) pending() bool {
	for _, p := range j.producers {
		if p.pub.Load() != p.durable.Load() {
			return true
		}
	}
	return false
}

func (j *Journal) loop() {
	defer close(j.done)
	for {
		if j.commit() {
			j.pace()
			continue
		}
		select {
		case reply := <-j.rotReq:
			j.rotateFor(reply)
			continue
		default:
		}
		j.idle.Store(true)
		if j.pending() && !j.failed.Load() {
			if j.idle.CompareAndSwap(true, false) {
				continue
			}
		}
		select {
		case <-j.wake:
		case reply := <-j.rotReq:
			j.idle.Store(false)
			j.rotateFor(reply)
		case <-j.stop:
			for j.commit() {
			}
			return
		}
	}
}

// pace waits until RoundEvery has passed since the last round began (or the
// journal is closing), so that the next round gathers what comes meanwhile.
// The writer is not idle then: producers publishing wake no one.
func (j *Journal) pace() {
	d := j.o.RoundEvery - time.Since(j.roundStart)
	if j.o.RoundEvery <= 0 || d <= 0 {
		return
	}
	if j.pacer == nil {
		j.pacer = time.NewTimer(d)
	} else {
		j.pacer.Reset(d)
	}
	select {
	case <-j.pacer.C:
	case <-j.stop:
		j.pacer.Stop()
	}
}

// commit is one round: gather, one write, one sync, publish. It reports
// whether it wrote anything.
func (j *Journal) commit() bool {
	if j.failed.Load() {
		return false
	}
	j.idle.Store(false)
	b := j.round[:0]
	for i, p := range j.producers {
		pub, from := p.pub.Load(), p.durable.Load()
		j.marks[i] = pub
		if pub == from {
			continue
		}
		lo, hi := from&p.mask, pub&p.mask
		if pub-from == uint64(len(p.buf)) || hi <= lo {
			b = append(b, p.buf[lo:]...)
			b = append(b, p.buf[:hi]...)
		} else {
			b = append(b, p.buf[lo:hi]...)
		}
	}
	j.round = b
	if len(b) == 0 {
		return false
	}
	j.roundStart = time.Now()
	if j.segBytes > segmentHeaderLen && j.segBytes+int64(len(b)) > j.o.SegmentBytes {
		if err := j.rotate(); err != nil {
			j.fail(err)
			return false
		}
	}
	if _, err := j.seg.Write(b); err != nil {
		j.fail(fmt.Errorf("journal: writing %s: %w", segmentName(j.segIndex-1), err))
		return false
	}
	j.segBytes += int64(len(b))
	t := time.Now()
	if err := j.seg.Sync(); err != nil {
		j.fail(fmt.Errorf("journal: syncing %s: %w", segmentName(j.segIndex-1), err))
		return false
	}
	j.M.observe(time.Since(t))
	for i, p := range j.producers {
		p.durable.Store(j.marks[i])
	}
	recs := 0
	for off := 0; off+HeaderLen <= len(b); off += HeaderLen + int(binary.BigEndian.Uint32(b[off:])) {
		recs++
	}
	j.M.Records.Add(uint64(recs))
	j.M.Bytes.Add(uint64(len(b)))
	j.M.Rounds.Add(1)
	j.mu.Lock()
	j.cond.Broadcast()
	j.mu.Unlock()
	if j.o.OnDurable != nil {
		j.o.OnDurable()
	}
	return true
}

// fail makes the journal's first failure sticky. OnFail runs before the
// waiters wake, so that whoever a failed Wait answers finds it reported.
func (j *Journal) fail(err error) {
	j.mu.Lock()
	first := j.err == nil
	if first {
		j.err = err
	}
	j.mu.Unlock()
	if first && j.o.OnFail != nil {
		j.o.OnFail(err)
	}
	j.mu.Lock()
	j.failed.Store(true)
	j.cond.Broadcast()
	j.mu.Unlock()
}

type rotated struct {
	segment uint64
	err     error
}

// Rotate makes the writer start a new segment and returns its index: every
// record published after Rotate returns lands in it or a later one. A
// snapshot starts so, and may then remove every segment before it.
func (j *Journal) Rotate() (uint64, error) {
	reply := make(chan rotated, 1)
	select {
	case j.rotReq <- reply:
	case <-j.done:
		return 0, errors.New("journal: closed")
	}
	r := <-reply
	return r.segment, r.err
}

func (j *Journal) rotateFor(reply chan rotated) {
	for j.commit() { // what was published before goes to the old segment
	}
	if err := j.Err(); err != nil {
		reply <- rotated{err: err}
		return
	}
	if err := j.rotate(); err != nil {
		j.fail(err)
		reply <- rotated{err: err}
		return
	}
	reply <- rotated{segment: j.segIndex - 1}
}

// RemoveBefore removes the segments before index segment: a durable
// snapshot holds their state.
func (j *Journal) RemoveBefore(segment uint64) error {
	names, err := listSegments(j.o.Dir)
	if err != nil {
		return err
	}
	removed := false
	for _, name := range names {
		if idx, _ := segmentIndex(name); idx < segment {
			if err := os.Remove(filepath.Join(j.o.Dir, name)); err != nil {
				return fmt.Errorf("journal: %w", err)
			}
			removed = true
		}
	}
	if removed {
		return SyncDir(j.o.Dir)
	}
	return nil
}

// Wait blocks until producer pid's records up to pos are durable, or the
// journal fails (its error). Any goroutine may call it.
func (j *Journal) Wait(pid uint16, pos uint64) error {
	p := j.producers[pid]
	j.mu.Lock()
	defer j.mu.Unlock()
	for !p.Durable(pos) {
		if j.failed.Load() {
			return j.err
		}
		j.cond.Wait()
	}
	return nil
}

// Producers is how many producers are registered.
func (j *Journal) Producers() int { return len(j.producers) }

// rotate closes the current segment (synced by its last round) and starts
// the next, its header and directory entry synced before any record.
func (j *Journal) rotate() error {
	if j.seg != nil {
		if err := j.seg.Close(); err != nil {
			return fmt.Errorf("journal: closing %s: %w", segmentName(j.segIndex-1), err)
		}
		j.seg = nil
	}
	path := filepath.Join(j.o.Dir, segmentName(j.segIndex))
	f, err := j.o.Create(path)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if _, err := f.Write(segmentHeader(j.o.Sets)); err != nil {
		f.Close()
		return fmt.Errorf("journal: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("journal: syncing %s: %w", path, err)
	}
	if err := SyncDir(j.o.Dir); err != nil {
		f.Close()
		return err
	}
	j.seg, j.segIndex, j.segBytes = f, j.segIndex+1, segmentHeaderLen
	j.M.Segments.Add(1)
	return nil
}

// WriteFile writes a file under a temporary name, syncs it, renames it
// into place and syncs the directory: a crash leaves the old file or the
// whole new one. Snapshots are written so.
func WriteFile(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes a directory's entries (files created, renamed, removed)
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("journal: syncing directory %s: %w", dir, err)
	}
	return nil
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return unix.Fdatasync(int(f.Fd())) }

func createFile(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Durable tells whether producer pid's records up to pos are on disk: true
// for position 0 (nothing to wait for) and for the nil Journal.
func (j *Journal) Durable(pid uint16, pos uint64) bool {
	return j == nil || pos == 0 || j.producers[pid].Durable(pos)
}

// Started tells whether Start ran: Close is for a started journal.
func (j *Journal) Started() bool { return j.seg != nil || j.M.Segments.Load() > 0 }
