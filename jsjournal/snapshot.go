package jsjournal

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
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
	// (journal.Journal.MarkSeq): the replay reads from it.
	Seq uint64
	// Owner and Epoch are the group's owner when the snapshot was taken,
	// and ClaimSeq its claim's message: a reader checks that Owner put it
	// (its bucket), that the claim at ClaimSeq is Owner's at Epoch, and
	// that no claim came between it and Seq. A replay from it drops the
	// rounds of any other gateway until a claim. Owner defaults to the
	// Store's node.
	Owner    int
	Epoch    uint64
	ClaimSeq uint64
	Parts    []Part // each producer's state: the replay skips its records up to its mark
}

// An object of a bucket:
//
//	magic "HBGSNP02" · set u32 · id u64 · seq u64 · epoch u64 · claim seq u64 · owner u16
//	parts u32 · parts × (producer u16 · len u32 · bytes) · CRC-32C of all before it u32
//
// Its name is <set>.<seq as 16 hex digits>, in its owner's bucket.
const snapshotMagic = "HBGSNP02"

// objectName is set's snapshot object replaying from seq.
func objectName(set int, seq uint64) string {
	return fmt.Sprintf("%d.%016x", set, seq)
}

// objectSeq reads seq from one of set's object names: false for another
// SET's or any other name.
func objectSeq(set int, name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, strconv.Itoa(set)+".")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(hex, 16, 64)
	return seq, err == nil
}

func encodeSnapshot(set int, s Snapshot) []byte {
	n := 64
	for _, p := range s.Parts {
		n += 6 + len(p.Data)
	}
	b := make([]byte, 0, n)
	b = append(b, snapshotMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(set))
	b = binary.BigEndian.AppendUint64(b, s.ID)
	b = binary.BigEndian.AppendUint64(b, s.Seq)
	b = binary.BigEndian.AppendUint64(b, s.Epoch)
	b = binary.BigEndian.AppendUint64(b, s.ClaimSeq)
	b = binary.BigEndian.AppendUint16(b, uint16(s.Owner))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Parts)))
	for _, p := range s.Parts {
		b = binary.BigEndian.AppendUint16(b, p.PID)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.Data)))
		b = append(b, p.Data...)
	}
	return binary.BigEndian.AppendUint32(b, journal.Checksum(b))
}

var errSnapshotFormat = errors.New("not a whole snapshot")

const snapshotHeader = 8 + 4 + 8 + 8 + 8 + 8 + 2

func decodeSnapshot(set int, b []byte) (Snapshot, error) {
	bad := func(why string) (Snapshot, error) { return Snapshot{}, fmt.Errorf("%w: %s", errSnapshotFormat, why) }
	if len(b) < snapshotHeader+4+4 || string(b[:8]) != snapshotMagic {
		return bad("no snapshot header")
	}
	body := b[:len(b)-4]
	if journal.Checksum(body) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return bad("checksum mismatch")
	}
	if g := int(binary.BigEndian.Uint32(b[8:])); g != set {
		return bad(fmt.Sprintf("it is SET %d's", g))
	}
	s := Snapshot{ID: binary.BigEndian.Uint64(b[12:]), Seq: binary.BigEndian.Uint64(b[20:]), Epoch: binary.BigEndian.Uint64(b[28:]),
		ClaimSeq: binary.BigEndian.Uint64(b[36:]), Owner: int(binary.BigEndian.Uint16(b[44:]))}
	return decodeParts(s, body[snapshotHeader:])
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

// PutSnapshot keeps snap as set's newest snapshot, in this gateway's bucket,
// then deletes this gateway's older snapshots of set: once it returns, a
// load starts from snap. Its parts' marks must be durable, snap.Seq the
// earliest message holding one, and snap's owner this gateway, at the
// epoch of its claim at ClaimSeq. The messages it holds are dropped by the
// journal's compaction (journal.Journal.Compact), the owner's own: no
// gateway can drop another's.
func (s *Store) PutSnapshot(ctx context.Context, set int, snap Snapshot) error {
	if snap.ID == 0 || snap.Seq == 0 || snap.ClaimSeq == 0 || snap.ClaimSeq >= snap.Seq {
		return fmt.Errorf("jsjournal: a snapshot of SET %d needs its id, the sequence of its first mark and of its owner's claim before it", set)
	}
	snap.Owner = s.o.Node
	name := objectName(set, snap.Seq)
	meta := jetstream.ObjectMeta{Name: name, Metadata: map[string]string{
		"id": strconv.FormatUint(snap.ID, 10), "seq": strconv.FormatUint(snap.Seq, 10),
		"owner": strconv.Itoa(snap.Owner), "epoch": strconv.FormatUint(snap.Epoch, 10), "set": strconv.Itoa(set)}}
	if _, err := s.obj.Put(ctx, meta, bytes.NewReader(encodeSnapshot(set, snap))); err != nil {
		return fmt.Errorf("jsjournal: putting snapshot %s: %w", name, err)
	}
	infos, err := s.obj.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("jsjournal: listing snapshots: %w", err)
	}
	for _, in := range infos {
		if seq, ok := objectSeq(set, in.Name); ok && !in.Deleted && seq < snap.Seq {
			if err := s.obj.Delete(ctx, in.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("jsjournal: deleting snapshot %s older than %s: %w", in.Name, name, err)
			}
		}
	}
	return nil
}

// candidate is a snapshot object of a SET, in its writer's bucket.
type candidate struct {
	node int
	seq  uint64
	name string
}

// candidates lists set's snapshot objects in every gateway's bucket,
// newest first.
func (s *Store) candidates(ctx context.Context, set int) ([]candidate, error) {
	var out []candidate
	for node := range s.l.Gateways {
		b, err := s.bucket(ctx, node)
		if err != nil {
			return nil, err
		}
		infos, err := b.List(ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jsjournal: listing %s: %w", s.l.Bucket(node), err)
		}
		for _, in := range infos {
			if seq, ok := objectSeq(set, in.Name); ok && !in.Deleted {
				out = append(out, candidate{node, seq, in.Name})
			}
		}
	}
	slices.SortFunc(out, func(a, b candidate) int { return cmp.Compare(b.seq, a.seq) })
	return out, nil
}

// newerSnapshot reports whether set has a snapshot its reader would take
// that replays from after seq.
func (s *Store) newerSnapshot(ctx context.Context, set int, seq uint64) (bool, error) {
	cs, err := s.candidates(ctx, set)
	if err != nil {
		return false, err
	}
	for _, c := range cs {
		if c.seq <= seq {
			break
		}
		if _, err := s.readSnapshot(ctx, set, c); err == nil {
			return true, nil
		} else if !errors.Is(err, errSnapshotRefused) && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return false, err
		}
	}
	return false, nil
}

var errSnapshotRefused = errors.New("jsjournal: a snapshot refused")

// GetSnapshot reads set's newest snapshot its reader can trust; false
// without one. A snapshot is trusted when its owner put it (its bucket is
// the owner's, which only the owner may write), its owner's claim is where
// it says, at its epoch, and no claim of the SET came between that claim
// and the snapshot's first mark: else it is refused, counted and logged,
// and the next newest is tried.
func (s *Store) GetSnapshot(ctx context.Context, set int) (Snapshot, bool, error) {
	for tries := 0; ; tries++ {
		cs, err := s.candidates(ctx, set)
		if err != nil || len(cs) == 0 {
			return Snapshot{}, false, err
		}
		relist := false
		for _, c := range cs {
			snap, err := s.readSnapshot(ctx, set, c)
			switch {
			case err == nil:
				return snap, true, nil
			case errors.Is(err, jetstream.ErrObjectNotFound) && tries < 3:
				relist = true // deleted since the list: a newer one is there
			case errors.Is(err, errSnapshotRefused), errors.Is(err, jetstream.ErrObjectNotFound):
				continue
			default:
				return Snapshot{}, false, err
			}
			break
		}
		if !relist {
			return Snapshot{}, false, nil
		}
	}
}

// readSnapshot reads candidate c of set and checks it: errSnapshotRefused
// (counted) when it is not one to trust.
func (s *Store) readSnapshot(ctx context.Context, set int, c candidate) (Snapshot, error) {
	b, err := s.bucket(ctx, c.node)
	if err != nil {
		return Snapshot{}, err
	}
	data, err := b.GetBytes(ctx, c.name)
	if err != nil {
		return Snapshot{}, fmt.Errorf("jsjournal: reading snapshot %s of %s: %w", c.name, s.l.Bucket(c.node), err)
	}
	snap, err := decodeSnapshot(set, data)
	if err == nil {
		err = s.trust(ctx, set, c, snap)
	}
	if err != nil {
		s.refuse(RefusedSnapshot)
		return Snapshot{}, fmt.Errorf("%w: %s of %s: %v", errSnapshotRefused, c.name, s.l.Bucket(c.node), err)
	}
	return snap, nil
}

// trust checks snapshot snap of set, read as candidate c, against the
// journal: its writer owned the SET from the claim it names up to its first
// mark.
func (s *Store) trust(ctx context.Context, set int, c candidate, snap Snapshot) error {
	switch {
	case snap.Seq != c.seq:
		return fmt.Errorf("it replays from %d, its name says %d", snap.Seq, c.seq)
	case snap.Owner != c.node:
		return fmt.Errorf("it names gateway %d its owner, in gateway %d's bucket", snap.Owner, c.node)
	case snap.ClaimSeq == 0 || snap.ClaimSeq >= snap.Seq:
		return fmt.Errorf("its owner's claim at %d is not before its first mark at %d", snap.ClaimSeq, snap.Seq)
	}
	claim, err := s.get(ctx, set, snap.ClaimSeq)
	if err != nil {
		return err
	}
	if !claim.Valid || !claim.Fenced || !claim.Claim || claim.Release || claim.Node != snap.Owner || claim.Epoch != snap.Epoch {
		return fmt.Errorf("message %d is not gateway %d's claim at epoch %d", snap.ClaimSeq, snap.Owner, snap.Epoch)
	}
	after, err := s.nextClaim(ctx, set, snap.ClaimSeq+1)
	if err != nil {
		return err
	}
	if after != 0 && after < snap.Seq {
		return fmt.Errorf("a claim at %d came between its owner's at %d and its first mark at %d", after, snap.ClaimSeq, snap.Seq)
	}
	first, err := s.get(ctx, set, snap.Seq)
	if err != nil {
		return err
	}
	if !first.Valid || !first.Fenced || first.Claim || first.Node != snap.Owner {
		return fmt.Errorf("message %d is not a round of gateway %d", snap.Seq, snap.Owner)
	}
	return nil
}

// nextClaim is the sequence of set's first claim message at or after seq, 0
// for none.
func (s *Store) nextClaim(ctx context.Context, set int, seq uint64) (uint64, error) {
	filter := s.l.Prefix + ".j." + strconv.Itoa(set) + ".*." + kindClaim
	m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jsjournal: the claim of SET %d at or after %d: %w", set, seq, err)
	}
	return m.Sequence, nil
}
