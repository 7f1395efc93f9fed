package journal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

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
	// CPU whatever it holds, so under a light load rounds of a few records
	// each would cost more than the answers they hold; a record waits at most
	// this much longer for its round.
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

	// Sink, when not nil, takes the place of the segment files (Dir, the
	// checkpoint, Rotate, Replay and RemoveBefore are unused): each round
	// is one message per group it touched, all in flight at once, each
	// appended only if its group's last message is still the one this
	// writer knows of. Groups start closed: Reopen opens one.
	Sink Sink
	// OnFenced runs on the writer's goroutine when a group's message was
	// refused because another writer appended to it: the group is fenced,
	// nothing of it becomes durable here again until a Reopen, and the
	// server drops its SET; err says what the sink refused. It must not
	// block or call Reopen or Release.
	OnFenced func(group int, err error)
	// OnGroupFailed runs on the writer's goroutine when a group's message
	// failed otherwise (a timeout, the sink unavailable): what it held may
	// or may not have been stored, so nothing of the group becomes durable
	// until it is reloaded and reopened. It must not block or call Reopen
	// or Release.
	OnGroupFailed func(group int, err error)
}

const (
	// DefaultRoundEvery is Options.RoundEvery's default: at most 1,000
	// rounds (fdatasyncs) a second.
	DefaultRoundEvery = time.Millisecond
	// DefaultCheckpointEvery is Options.CheckpointEvery's default.
	DefaultCheckpointEvery = 10 * time.Millisecond
)

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
	groups    []*group // in the order their first producer registered

	// The writer's, with a sink: a round's batches and their groups.
	batches     []Batch
	batchGroups []*group

	// What Open found, for Replay and Start.
	segs     []segment // oldest first
	cuts     []Cut
	remarked []uint16 // marked again by Replay

	// The writer's: its goroutine alone touches them while it runs.
	seg        File
	segIndex   uint64      // the next segment's
	segBytes   int64       // the current segment's size (the newest found by Open's, before Start)
	seq        uint64      // the last round written
	round      []byte      // a round's header and body, reused
	marks      []uint64    // each producer's published position, as the round gathered it
	roundStart time.Time   // when the last round began gathering
	pacer      *time.Timer // waits out RoundEvery after a round

	started bool        // Start ran: Close waits for the writer
	running atomic.Bool // the writer's goroutine serves ctl
	idle    atomic.Bool
	wake    chan struct{}
	rotReq  chan chan rotated
	ctl     chan *groupCtl
	stop    chan struct{}
	done    chan struct{}

	// The failure and the durable position, for Wait and the checkpoint.
	failed atomic.Bool
	mu     sync.Mutex
	cond   *sync.Cond
	err    error
	dpos   position // durable: the end of the last round synced (under mu)

	// The checkpoint: its own goroutine writes it, woken by ckWake after
	// rounds; ckMu orders its writes.
	ckMu   sync.Mutex
	ckFile *os.File
	ckGen  uint64
	ckSlot int
	ckPos  position // the last written
	ckBuf  [checkpointLen]byte
	ckWake chan struct{}
	ckDone chan struct{}

	M Metrics
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
	j := &Journal{o: o, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		rotReq: make(chan chan rotated), ctl: make(chan *groupCtl), ckWake: make(chan struct{}, 1), ckDone: make(chan struct{}),
		round: make([]byte, RoundHeaderLen, 64<<10)}
	j.cond = sync.NewCond(&j.mu)
	if o.Sink != nil {
		return j, nil
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

// Start opens a new segment (with a sink: checks that each group's round
// fits one message) and starts the writer and the checkpoint's goroutine.
func (j *Journal) Start() error {
	if j.o.Sink != nil {
		if err := j.startSink(); err != nil {
			return err
		}
	} else if err := j.rotate(); err != nil {
		return err
	}
	j.started = true
	j.running.Store(true)
	go j.loop()
	if j.o.CheckpointEvery > 0 && j.o.Sink == nil {
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
		if j.o.Sink == nil {
			err = j.Checkpoint()
		}
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

// Wait blocks until producer pid's records up to pos are durable, or they
// never will be: the journal's error, or with a sink a *GroupError (its
// group fenced, failed or not open here, or the records appended before its
// last Reopen). Any goroutine may call it.
func (j *Journal) Wait(pid uint16, pos uint64) error {
	p := j.producers[pid]
	j.mu.Lock()
	defer j.mu.Unlock()
	for !p.Durable(pos) {
		if err := j.lostErr(p, pos); err != nil {
			return err
		}
		j.cond.Wait()
	}
	return nil
}

// Durable tells whether producer pid's records up to pos are on disk: true
// for position 0 (nothing to wait for) and for the nil Journal.
func (j *Journal) Durable(pid uint16, pos uint64) bool {
	return j == nil || pos == 0 || j.producers[pid].Durable(pos)
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

// Lag is the bytes published and not yet durable, over every producer of
// an open group.
func (j *Journal) Lag() uint64 {
	var lag uint64
	for _, p := range j.producers {
		if p.g.state.Load() == groupOpen {
			lag += p.pub.Load() - min(p.durable.Load(), p.pub.Load())
		}
	}
	return lag
}
