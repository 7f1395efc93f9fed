package jsjournal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"hongbao/journal"
)

// Part is one producer's state in a snapshot.
type Part struct {
	PID  uint16
	Data []byte
}

// Snapshot is a group's state as of its producers' marks of snapshot ID.
type Snapshot struct {
	ID uint64 // the snapshot whose marks its producers appended (journal.Producer.Mark)
	// Seq is the earliest message holding one of its marks
	// (journal.Journal.MarkSeq): the replay reads from it, and the messages
	// before it are purged once the snapshot is put.
	Seq uint64
	// Owner and Epoch are the group's owner when the snapshot was taken: a
	// replay from it drops the messages of any other gateway until a claim.
	// Owner defaults to the Store's gateway.
	Owner string
	Epoch uint64
	Parts []Part // each producer's state: the replay skips its records up to its mark
}

// An object of the bucket:
//
//	magic "HBGSNP01" · group i32 · id u64 · seq u64 · epoch u64 · owner len u16 · owner
//	parts u32 · parts × (producer u16 · len u32 · bytes) · CRC-32C of all before it u32
//
// Its name is <set.N|cluster>.<seq as 16 hex digits>.
const snapshotMagic = "HBGSNP01"

// objectName is group's snapshot object replaying from seq.
func objectName(group int, seq uint64) string {
	return fmt.Sprintf("%s.%016x", groupName(group, "set."), seq)
}

// objectSeq reads seq from one of group's object names: false for another
// group's or any other name.
func objectSeq(group int, name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, groupName(group, "set.")+".")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil
}

func encodeSnapshot(group int, s Snapshot) []byte {
	n := 64 + len(s.Owner)
	for _, p := range s.Parts {
		n += 6 + len(p.Data)
	}
	b := make([]byte, 0, n)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(int32(group)))
	b = binary.BigEndian.AppendUint64(b, s.ID)
	b = binary.BigEndian.AppendUint64(b, s.Seq)
	b = binary.BigEndian.AppendUint64(b, s.Epoch)
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.Owner)))
	b = append(b, s.Owner...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Parts)))
	for _, p := range s.Parts {
		b = binary.BigEndian.AppendUint16(b, p.PID)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.Data)))
		b = append(b, p.Data...)
	}
	return binary.BigEndian.AppendUint32(b, journal.Checksum(b))
}

var errSnapshotFormat = errors.New("not a whole snapshot")

func decodeSnapshot(group int, b []byte) (Snapshot, error) {
	bad := func(why string) (Snapshot, error) { return Snapshot{}, fmt.Errorf("%w: %s", errSnapshotFormat, why) }
	if len(b) < 8+4+24+2+4+4 || string(b[:8]) != snapshotMagic {
		return bad("no snapshot header")
	}
	body := b[:len(b)-4]
	if journal.Checksum(body) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return bad("checksum mismatch")
	}
	if g := int(int32(binary.BigEndian.Uint32(b[8:]))); g != group {
		return bad(fmt.Sprintf("it is group %d's", g))
	}
	s := Snapshot{ID: binary.BigEndian.Uint64(b[12:]), Seq: binary.BigEndian.Uint64(b[20:]), Epoch: binary.BigEndian.Uint64(b[28:])}
	rest := body[36:]
	k := int(binary.BigEndian.Uint16(rest))
	if len(rest) < 2+k+4 {
		return bad("cut short")
	}
	s.Owner = string(rest[2 : 2+k])
	return decodeParts(s, rest[2+k:])
}

// decodeParts reads the part count and the parts from b.
func decodeParts(s Snapshot, b []byte) (Snapshot, error) {
	if len(b) < 4 {
		return Snapshot{}, fmt.Errorf("%w: cut short", errSnapshotFormat)
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	for ; n > 0; n-- {
		if len(b) < 6 {
			return Snapshot{}, fmt.Errorf("%w: cut short", errSnapshotFormat)
		}
		pid, k := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint32(b[2:]))
		if len(b) < 6+k {
			return Snapshot{}, fmt.Errorf("%w: cut short", errSnapshotFormat)
		}
		s.Parts = append(s.Parts, Part{PID: pid, Data: b[6 : 6+k]})
		b = b[6+k:]
	}
	if len(b) != 0 {
		return Snapshot{}, fmt.Errorf("%w: bytes after its parts", errSnapshotFormat)
	}
	return s, nil
}

// PutSnapshot keeps snap as group's newest snapshot, then deletes the
// group's older snapshots and purges the subject's messages before the
// newest of them: once it returns, a load starts from snap. The messages
// after the previous snapshot are kept until the next put, so that a
// reader a snapshot behind — a Follower lagging, a replay under way — does
// not miss one. Its parts' marks must be durable, and snap.Seq the earliest
// message holding one.
func (s *Store) PutSnapshot(ctx context.Context, group int, snap Snapshot) error {
	if snap.ID == 0 || snap.Seq == 0 {
		return fmt.Errorf("jsjournal: a snapshot of %s needs its id and the sequence of its first mark", s.Subject(group))
	}
	if snap.Owner == "" {
		snap.Owner = s.o.Gateway
	}
	name := objectName(group, snap.Seq)
	meta := jetstream.ObjectMeta{Name: name, Metadata: map[string]string{
		"id": strconv.FormatUint(snap.ID, 10), "seq": strconv.FormatUint(snap.Seq, 10),
		"owner": snap.Owner, "epoch": strconv.FormatUint(snap.Epoch, 10), "subject": s.Subject(group)}}
	if _, err := s.obj.Put(ctx, meta, bytes.NewReader(encodeSnapshot(group, snap))); err != nil {
		return fmt.Errorf("jsjournal: putting snapshot %s: %w", name, err)
	}
	names, err := s.snapshots(ctx, group)
	if err != nil {
		return err
	}
	var prev uint64
	for seq, old := range names {
		if seq < snap.Seq {
			prev = max(prev, seq)
			if err := s.obj.Delete(ctx, old); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("jsjournal: deleting snapshot %s older than %s: %w", old, name, err)
			}
		}
	}
	if prev == 0 {
		return nil // the first: what precedes it goes at the next put
	}
	subject := s.Subject(group)
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(prev)); err != nil {
		return fmt.Errorf("jsjournal: purging %s before %d after snapshot %s: %w", subject, prev, name, err)
	}
	return nil
}

// snapshots lists group's snapshot objects by the sequence they replay from.
func (s *Store) snapshots(ctx context.Context, group int) (map[uint64]string, error) {
	infos, err := s.obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jsjournal: listing snapshots: %w", err)
	}
	m := map[uint64]string{}
	for _, in := range infos {
		if seq, ok := objectSeq(group, in.Name); ok && !in.Deleted {
			m[seq] = in.Name
		}
	}
	return m, nil
}

// newest is the sequence group's newest snapshot replays from, and its
// name; 0 without one.
func (s *Store) newest(ctx context.Context, group int) (uint64, string, error) {
	names, err := s.snapshots(ctx, group)
	var top uint64
	for seq := range names {
		top = max(top, seq)
	}
	return top, names[top], err
}

// GetSnapshot reads group's newest snapshot; false without one.
func (s *Store) GetSnapshot(ctx context.Context, group int) (Snapshot, bool, error) {
	for tries := 0; ; tries++ {
		seq, name, err := s.newest(ctx, group)
		if err != nil || seq == 0 {
			return Snapshot{}, false, err
		}
		b, err := s.obj.GetBytes(ctx, name)
		if errors.Is(err, jetstream.ErrObjectNotFound) && tries < 3 {
			continue // deleted since the list: a newer one is there
		}
		if err != nil {
			return Snapshot{}, false, fmt.Errorf("jsjournal: reading snapshot %s: %w", name, err)
		}
		snap, err := decodeSnapshot(group, b)
		if err == nil && snap.Seq != seq {
			err = fmt.Errorf("%w: it replays from %d", errSnapshotFormat, snap.Seq)
		}
		if err != nil {
			return Snapshot{}, false, fmt.Errorf("jsjournal: snapshot %s: %w", name, err)
		}
		return snap, true, nil
	}
}
