package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// loop is the writer's goroutine: a round while anything is published, each
// paced; else it sleeps until a Publish kicks it, a Rotate asks or Close
// stops it, and then writes what is left.
func (j *Journal) loop() {
	defer close(j.done)
	for {
		// Between any two rounds, so that a steady load never starves a
		// Rotate or a Reopen.
		select {
		case reply := <-j.rotReq:
			j.rotateFor(reply)
		case c := <-j.ctl:
			j.apply(c)
		default:
		}
		if j.commit() {
			j.pace()
			continue
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
		case c := <-j.ctl:
			j.idle.Store(false)
			j.apply(c)
		case <-j.stop:
			for j.commit() {
			}
			return
		}
	}
}

// kick wakes the writer if it sleeps: a paced or busy writer finds the
// records at its next round, so that a Publish wakes no one then.
func (j *Journal) kick() {
	if j.idle.Load() && j.idle.CompareAndSwap(true, false) {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// pending tells whether a producer of an open group published what is not
// durable yet: the writer asks after it said it sleeps, so that no Publish
// in between is lost.
func (j *Journal) pending() bool {
	for _, p := range j.producers {
		if p.pub.Load() != p.durable.Load() && p.g.state.Load() == groupOpen {
			return true
		}
	}
	return false
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
	if j.o.Sink != nil {
		return j.commitSink()
	}
	j.idle.Store(false)
	b := j.round[:RoundHeaderLen]
	for i, p := range j.producers {
		pub, from := p.pub.Load(), p.durable.Load()
		j.marks[i] = pub
		if pub != from {
			b = p.gather(b, from, pub)
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

// rotated is the writer's answer to a Rotate.
type rotated struct {
	segment uint64
	err     error
}

// Rotate makes the writer start a new segment and returns its index: every
// record published after Rotate returns lands in it or a later one. A
// snapshot starts so, and may then remove every segment before it.
func (j *Journal) Rotate() (uint64, error) {
	if j.o.Sink != nil {
		return 0, errSink
	}
	reply := make(chan rotated, 1)
	select {
	case j.rotReq <- reply:
	case <-j.done:
		return 0, errors.New("journal: closed")
	}
	r := <-reply
	return r.segment, r.err
}

// rotateFor starts the new segment a Rotate asked for, on the writer's
// goroutine, after a last round of what was published before. One round,
// not until none is left: under a steady load there is always another.
func (j *Journal) rotateFor(reply chan rotated) {
	j.commit()
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
