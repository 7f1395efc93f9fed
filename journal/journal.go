package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	// OnFail runs once, on the writer's (or the checkpoint's) goroutine,
	// when a write or sync fails.
	OnFail func(error)
	// RoundEvery is the least time from the start of one round to the start
	// of the next (default DefaultRoundEvery; negative: none, a round starts
	// as soon as the last one is durable). An fdatasync costs about the same
	// CPU whatever it holds (~70 µs here), so under a light load rounds of a
	// few records each would cost more than the answers they hold; a record
	// waits at most this much longer for its round.
	RoundEvery time.Duration
	// CheckpointEvery is the least time between two writes of the checkpoint
	// after rounds (default DefaultCheckpointEvery; negative: only at Open,
	// Checkpoint, RemoveBefore and Close). Rounds synced since the last write
	// are what a cut of the journal can remove unseen.
	CheckpointEvery time.Duration
	// Base is the segment the replay starts at (the newest snapshot's; 0:
	// none). The segments before it hold only the snapshot's state: Open
	// neither checks nor reads them, and the next RemoveBefore removes them.
	Base uint64
	// Repair: a start on a journal that is not whole cuts it where it stops
	// being whole instead of refusing, keeping every byte cut in files beside
	// it (Cuts lists them), and rewrites the checkpoint; a producer whose
	// snapshot mark was cut is marked again (Replay).
	Repair bool
}

// DefaultRoundEvery is Options.RoundEvery's default: at most 1,000 rounds
// (fdatasyncs) a second.
const DefaultRoundEvery = time.Millisecond

const (
	defaultSegmentBytes = 64 << 20
	defaultRingBytes    = 128 << 10
)

// Journal is the write-ahead journal: producers append records to their
// rings, one writer goroutine gathers every producer's published records into
// one write and one fdatasync per round.
type Journal struct {
	o         Options
	producers []*Producer
	marks     []uint64

	seg      File
	segIndex uint64    // the next segment's
	segBytes int64     // the current segment's size (the newest found by Open's, before Start)
	seq      uint64    // the last round written
	segs     []segment // found at Open, oldest first, for Replay
	round    []byte    // a round's header and body, reused
	cuts     []Cut
	remarked []uint16

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
	dpos   position // durable: the end of the last round synced (under mu)

	// The checkpoint: its own goroutine writes it, woken by ckWake after
	// rounds; ckMu orders its writes.
	ckMu    sync.Mutex
	ckFile  *os.File
	ckGen   uint64
	ckSlot  int
	ckPos   position // the last written
	ckBuf   [checkpointLen]byte
	ckWake  chan struct{}
	ckDone  chan struct{}
	started bool

	M Metrics
}

// Metrics are the writer's counters; any goroutine may read them.
type Metrics struct {
	Records, Bytes, Rounds, Fsyncs atomic.Uint64
	FsyncNs                        atomic.Uint64               // sum of fsync latencies
	FsyncBuckets                   [FsyncBuckets]atomic.Uint64 // FsyncBucketUs(i) µs and less (the last: more)
	Segments                       atomic.Uint64               // segment files created
	Checkpoints                    atomic.Uint64               // checkpoint writes
	// What Open cut: torn tails, repairs (each cut, segment moved aside or
	// file found missing), and the bytes and records they held.
	TornCuts, Repairs, CutBytes, CutRecords atomic.Uint64
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

// Cuts is what Open cut: torn tails, and with Options.Repair what it cut or
// found missing.
func (j *Journal) Cuts() []Cut { return j.cuts }

// Remarked lists the producers whose snapshot mark a repair had cut, marked
// again by Replay.
func (j *Journal) Remarked() []uint16 { return j.remarked }

// Producer registers a new producer; all are registered before Start.
func (j *Journal) Producer() *Producer {
	if len(j.producers) >= 1<<16 || uint64(len(j.producers)+1)*uint64(j.o.RingBytes) > math.MaxUint32-RoundHeaderLen {
		panic("BUG: journal: more than 65,536 producers, or their rings past a round's 4 GiB")
	}
	p := &Producer{j: j, id: uint16(len(j.producers)), buf: make([]byte, j.o.RingBytes),
		mask: uint64(j.o.RingBytes - 1), scratch: make([]byte, 0, 512)}
	j.producers = append(j.producers, p)
	j.marks = append(j.marks, 0)
	return p
}

// Start opens a new segment and starts the writer and the checkpoint's
// goroutine.
func (j *Journal) Start() error {
	if err := j.rotate(); err != nil {
		return err
	}
	j.started = true
	go j.loop()
	if j.o.CheckpointEvery > 0 {
		go j.checkpointLoop()
	} else {
		close(j.ckDone)
	}
	return nil
}

// Close writes what the producers published, syncs it, stops the writer and
// writes the checkpoint. The producers must have stopped appending.
func (j *Journal) Close() error {
	select {
	case <-j.stop:
	default:
		close(j.stop)
	}
	var err error
	if j.started {
		<-j.done
		<-j.ckDone
		err = j.Checkpoint()
	}
	if j.seg != nil {
		err = errors.Join(err, j.seg.Close())
		j.seg = nil
	}
	j.ckMu.Lock()
	if j.ckFile != nil {
		err = errors.Join(err, j.ckFile.Close())
		j.ckFile = nil
	}
	j.ckMu.Unlock()
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
	b := j.round[:RoundHeaderLen]
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
	if len(b) == RoundHeaderLen {
		return false
	}
	j.roundStart = time.Now()
	if j.segBytes > segmentHeaderLen && j.segBytes+int64(len(b)) > j.o.SegmentBytes {
		if err := j.rotate(); err != nil {
			j.fail(err)
			return false
		}
	}
	putRoundHeader(b, j.seq+1)
	if _, err := j.seg.Write(b); err != nil {
		j.fail(fmt.Errorf("journal: writing %s: %w", segmentName(j.segIndex-1), err))
		return false
	}
	j.segBytes += int64(len(b))
	j.seq++
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
	for off := RoundHeaderLen; off+HeaderLen <= len(b); off += HeaderLen + int(binary.BigEndian.Uint32(b[off:])) {
		recs++
	}
	j.M.Records.Add(uint64(recs))
	j.M.Bytes.Add(uint64(len(b)))
	j.M.Rounds.Add(1)
	j.mu.Lock()
	j.dpos = position{seg: j.segIndex - 1, off: j.segBytes, seq: j.seq}
	j.cond.Broadcast()
	j.mu.Unlock()
	j.kickCheckpoint()
	if j.o.OnDurable != nil {
		j.o.OnDurable()
	}
	return true
}

// kickCheckpoint tells the checkpoint's goroutine the durable position
// moved; it never blocks.
func (j *Journal) kickCheckpoint() {
	select {
	case j.ckWake <- struct{}{}:
	default:
	}
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
// snapshot holds their state. The checkpoint is brought up to date first,
// so that it never names a segment removed; they go oldest first, the
// directory synced after each, so that a crash leaves no gap.
func (j *Journal) RemoveBefore(segment uint64) error {
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
// the next, its header and directory entry synced before any round. The
// header holds the previous segment's size and last round, so that the next
// start knows if it was cut.
func (j *Journal) rotate() error {
	if j.seg != nil {
		if err := j.seg.Close(); err != nil {
			return fmt.Errorf("journal: closing %s: %w", segmentName(j.segIndex-1), err)
		}
		j.seg = nil
	}
	prevLen := j.segBytes
	if j.segIndex == 0 {
		prevLen = 0
	}
	path := filepath.Join(j.o.Dir, segmentName(j.segIndex))
	f, err := j.o.Create(path)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	h := segHeader{sets: uint32(j.o.Sets), index: j.segIndex, prevLen: prevLen, prevSeq: j.seq}
	if _, err := f.Write(h.bytes()); err != nil {
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
	j.mu.Lock()
	j.dpos = position{seg: j.segIndex - 1, off: segmentHeaderLen, seq: j.seq}
	j.mu.Unlock()
	j.kickCheckpoint()
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
