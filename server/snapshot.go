package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/stages"
)

// A snapshot file (snapshots/NNNN.snapshot under -data):
//
//	magic "HBSNAP01" · sets u32 · id u64 · segment u64 · parts u32
//	parts × (producer u16 · len u32 · bytes) · CRC-32C of all before it u32
//
// Each part is one journal producer's state (a SET's shake or split stage,
// the campaign runner) as of its mark of snapshot id in the journal; every
// mark is in segment or later, so the segments before it are removed once
// the file is durable.
const (
	snapshotMagic  = "HBSNAP01"
	snapshotSuffix = ".snapshot"
)

// snapshotStats are the last snapshot's figures, for /metrics.
type snapshotStats struct {
	count, bytes atomic.Uint64
	ns           atomic.Int64
}

type loadedSnapshot struct {
	path        string // "" without one
	id, segment uint64
	parts       map[uint16][]byte
}

func (s *Server) snapshotDir() string { return filepath.Join(s.opts.Data, "snapshots") }

func snapshotName(id uint64) string { return fmt.Sprintf("%016x%s", id, snapshotSuffix) }

// loadSnapshot reads the newest snapshot in dir; none is the zero
// loadedSnapshot.
func loadSnapshot(dir string, sets int) (loadedSnapshot, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return loadedSnapshot{}, nil
	}
	if err != nil {
		return loadedSnapshot{}, err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), snapshotSuffix) && len(e.Name()) == 16+len(snapshotSuffix) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return loadedSnapshot{}, nil
	}
	slices.Sort(names)
	path := filepath.Join(dir, names[len(names)-1])
	b, err := os.ReadFile(path)
	if err != nil {
		return loadedSnapshot{}, err
	}
	bad := func(why string) (loadedSnapshot, error) {
		return loadedSnapshot{}, fmt.Errorf("snapshot %s: %s: restore it, or move it away to start from the journal alone (if its segments are still there)", path, why)
	}
	if len(b) < 32+4 || string(b[:8]) != snapshotMagic {
		return bad("not a snapshot")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if journal.Checksum(body) != sum {
		return bad("checksum mismatch")
	}
	if n := int(binary.BigEndian.Uint32(b[8:])); n != sets {
		return loadedSnapshot{}, fmt.Errorf("snapshot %s was written by a server of %d SETs, this one has %d: start it with -sets %d", path, n, sets, n)
	}
	ls := loadedSnapshot{path: path, id: binary.BigEndian.Uint64(b[12:]), segment: binary.BigEndian.Uint64(b[20:]), parts: map[uint16][]byte{}}
	rest := body[32:]
	for n := binary.BigEndian.Uint32(b[28:]); n > 0; n-- {
		if len(rest) < 6 {
			return bad("cut short")
		}
		pid, k := binary.BigEndian.Uint16(rest), int(binary.BigEndian.Uint32(rest[2:]))
		if len(rest) < 6+k {
			return bad("cut short")
		}
		ls.parts[pid] = rest[6 : 6+k]
		rest = rest[6+k:]
	}
	if len(rest) != 0 {
		return bad("bytes after its parts")
	}
	return ls, nil
}

// snapshot writes every producer's state to a new snapshot file and removes
// the journal segments and snapshots it makes useless. The SETs serialize
// their stages on their own goroutines (a KSnapshot event), each marking its
// journal where its state stands; the file is kept only once every mark is
// durable.
func (s *Server) snapshot() error {
	if s.repl != nil {
		if s.repl.LostReason() != "" {
			return nil // what it runs is no longer its to snapshot
		}
		return s.snapshotSETs()
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.journal == nil || s.journal.Failed() {
		return nil
	}
	start := time.Now()
	for len(s.snapParts) > 0 { // a late part of a snapshot that gave up
		<-s.snapParts
	}
	// Ids are never reused, not even after an attempt that gave up: its
	// late marks and parts must not pass for this one's.
	id := s.snapID + 1
	s.snapID = id
	segment, err := s.journal.Rotate()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, i := range s.bus.Local() {
		r := s.bus.Ring(i)
		seq, err := r.Claim(1)
		if err != nil {
			return fmt.Errorf("snapshot: SET %d: %w", i, err)
		}
		*r.At(seq) = event.Event{Kind: event.KSnapshot, Env: id}
		r.Publish(seq, seq)
	}
	var parts []stages.Part
	if data, pid, pos, ok := s.camps.Snapshot(id); ok {
		parts = append(parts, stages.Part{ID: id, PID: pid, Pos: pos, Data: data})
	}
	timeout := time.After(time.Minute)
	for want := len(parts) + 2*len(s.bus.Local()); len(parts) < want; {
		select {
		case p := <-s.snapParts:
			if p.ID == id {
				parts = append(parts, p)
			}
		case <-timeout:
			return errors.New("snapshot: the SETs did not hand in their state within a minute")
		}
	}
	for _, p := range parts {
		if err := s.journal.Wait(p.PID, p.Pos); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	// The journal's checkpoint covers the marks before the snapshot is kept:
	// a start from it then knows if the rounds holding them were cut.
	if err := s.journal.Checkpoint(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	b := []byte(snapshotMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(s.opts.Sets))
	b = binary.BigEndian.AppendUint64(b, id)
	b = binary.BigEndian.AppendUint64(b, segment)
	b = binary.BigEndian.AppendUint32(b, uint32(len(parts)))
	for _, p := range parts {
		b = binary.BigEndian.AppendUint16(b, p.PID)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.Data)))
		b = append(b, p.Data...)
	}
	b = binary.BigEndian.AppendUint32(b, journal.Checksum(b))
	dir := s.snapshotDir()
	if err := journal.WriteFile(dir, snapshotName(id), b); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := s.journal.RemoveBefore(segment); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := removeOlder(dir, snapshotName(id)); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	took := time.Since(start)
	s.snapStats.count.Add(1)
	s.snapStats.bytes.Store(uint64(len(b)))
	s.snapStats.ns.Store(int64(took))
	s.log.Info("snapshot", "id", id, "bytes", len(b), "took", took.Round(time.Microsecond), "journal_from_segment", segment)
	return nil
}

// removeOlder removes the snapshots (and temporary files) before keep.
func removeOlder(dir, keep string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() < keep && strings.Contains(e.Name(), snapshotSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return journal.SyncDir(dir)
}

// snapshotLoop takes a snapshot every -snapshot-every, and when a takeover
// asks for one, until stopped.
func (s *Server) snapshotLoop(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	var now <-chan struct{} // a snapshot asked for at once
	if s.repl != nil {
		now = s.repl.SnapNow()
	}
	for {
		select {
		case <-stop:
			return
		case <-now:
			t.Reset(every)
			if err := s.snapshot(); err != nil {
				s.log.Error("snapshot failed: the journal is kept whole until the next one", "err", err)
			}
		case <-t.C:
			if err := s.snapshot(); err != nil {
				s.log.Error("snapshot failed: the journal is kept whole until the next one", "err", err)
			}
		}
	}
}
