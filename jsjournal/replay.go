package jsjournal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// ErrMoved: a newer snapshot was put, and what it holds purged, while the
// group loaded; the state loaded so far is not whole, so the caller drops it
// and loads again.
var ErrMoved = errors.New("jsjournal: a newer snapshot was put while the group loaded: load it again on fresh state")

// Replayed is what a replay read.
type Replayed struct {
	// LastSeq is the group's last message read: the claimant appends its
	// claim expecting it (AppendClaim), so that anything appended since
	// makes the claim fail and the claimant load again.
	LastSeq  uint64
	Messages int // messages read, claims and refused ones included
	Records  int // records handed over
	Claims   int
	// Owner and Epoch are the group's owner after the replay (-1: none):
	// the last claim's, or the snapshot's.
	Owner int
	Epoch uint64
	// Dropped are the messages that were not the owner's rounds — another
	// gateway's, appended without the SET's expected last sequence, or
	// claims out of turn — and DroppedRecords their records: never handed
	// over.
	Dropped, DroppedRecords int
	// Snapshot is the sequence the snapshot loaded replays from (Load; 0:
	// none).
	Snapshot uint64
}

// Load loads group: its newest snapshot handed to restore (if there is
// one), then every record after it handed to fn as Replay does. If a newer
// snapshot was put meanwhile it returns ErrMoved: the caller drops what it
// loaded and loads again.
func (s *Store) Load(ctx context.Context, group int, restore func(Snapshot) error, fn func(journal.Record) error) (Replayed, error) {
	snap, ok, err := s.getSnapshot(ctx, group)
	if err != nil {
		return Replayed{}, err
	}
	if ok {
		if err := restore(snap); err != nil {
			return Replayed{}, fmt.Errorf("jsjournal: restoring %s from its snapshot at %d: %w", s.l.SetFilter(group), snap.Seq, err)
		}
	}
	r, err := s.Replay(ctx, group, snap, fn)
	if err != nil {
		return r, err
	}
	r.Snapshot = snap.Seq
	// A snapshot put while this one replayed may have compacted messages it
	// was about to read: only a newer one can (compactions follow puts).
	if newer, err := s.newerSnapshot(ctx, group, snap.Seq); err != nil {
		return r, err
	} else if newer {
		return r, ErrMoved
	}
	return r, nil
}

// snapshotTry bounds a first read of a snapshot; each later try has twice
// the time. The Object Store reads through an ordered consumer that finds a
// message lost on its way only after two missed heartbeats (10 s): a read
// begun again is quicker than that.
const snapshotTry = 3 * time.Second

// getSnapshot is GetSnapshot, tried again with twice the time while a try
// runs out of it, until ctx ends.
func (s *Store) getSnapshot(ctx context.Context, group int) (Snapshot, bool, error) {
	for d := snapshotTry; ; d *= 2 {
		try, cancel := context.WithTimeout(ctx, d)
		snap, ok, err := s.GetSnapshot(try, group)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return snap, ok, err
		}
	}
}

// replayHeartbeat is how often the server tells a replay's pull it is
// alive: two missed, and the ordered consumer is made again from where it
// was, so that a pull lost on its way stalls a takeover that long at most.
const replayHeartbeat = 500 * time.Millisecond

// readFrom reads group's messages from message seq on (0: the first), in
// order, through an ordered consumer: what Replay and Follow read.
func (s *Store) readFrom(ctx context.Context, group int, seq uint64, opts ...jetstream.PullMessagesOpt) (jetstream.Consumer, jetstream.MessagesContext, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.l.SetFilter(group)}, InactiveThreshold: 30 * time.Second}
	if seq != 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq
	}
	cons, err := s.js.OrderedConsumer(ctx, s.l.Stream(), cfg)
	if err != nil {
		return nil, nil, err
	}
	it, err := cons.Messages(append(opts, jetstream.PullMaxMessages(1024), jetstream.PullHeartbeat(replayHeartbeat))...)
	if err != nil {
		return nil, nil, err
	}
	return cons, it, nil
}

// dropReader stops a readFrom and deletes its consumer, which would
// otherwise linger until its inactive threshold.
func (s *Store) dropReader(cons jetstream.Consumer, it jetstream.MessagesContext) {
	it.Stop()
	if info := cons.CachedInfo(); info != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.js.DeleteConsumer(ctx, s.l.Stream(), info.Name)
		cancel()
	}
}

// Replay hands to fn group's records from snapshot from on (the zero
// Snapshot: all of them), in the order of their messages: each producer's
// in the order appended, as journal.Journal.Replay does. A producer of the
// snapshot's parts has its records skipped up to its mark of from.ID;
// snapshot marks are the journal's and never handed over; so are claims.
// Only the owner's rounds are handed over — the owner the snapshot names,
// then each claim's — and only messages NATS fenced count: any other is
// dropped and counted (Refused). It reads up to the group's last message
// when it began, and returns that sequence. Payloads alias the messages:
// fn copies what it keeps.
func (s *Store) Replay(ctx context.Context, group int, from Snapshot, fn func(journal.Record) error) (Replayed, error) {
	filter := s.l.SetFilter(group)
	last, err := s.Last(ctx, group)
	if err != nil {
		return Replayed{}, err
	}
	r := Replayed{LastSeq: last.Seq, Owner: -1}
	if from.Seq != 0 {
		r.Owner, r.Epoch = from.Owner, from.Epoch
	}
	if from.Seq > last.Seq {
		return Replayed{}, fmt.Errorf("jsjournal: %s: the snapshot replays from message %d, and its last is %d: the stream lost messages", filter, from.Seq, last.Seq)
	}
	if last.Seq == 0 {
		return r, nil
	}
	f := newMarkFilter(from, fn)
	cons, it, err := s.readFrom(ctx, group, from.Seq, jetstream.PullExpiry(4*replayHeartbeat))
	if err != nil {
		return Replayed{}, fmt.Errorf("jsjournal: replaying %s: %w", filter, err)
	}
	defer s.dropReader(cons, it)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return r, fmt.Errorf("jsjournal: replaying %s after message %d: %w", filter, r.LastSeq, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return r, fmt.Errorf("jsjournal: replaying %s: %w", filter, err)
		}
		seq := md.Sequence.Stream
		if r.Messages == 0 && from.Seq != 0 && seq != from.Seq {
			return r, ErrMoved // the snapshot's first message was purged: a newer one holds it
		}
		if err := s.take(&r, s.parseMsg(m.Subject(), seq, m.Headers(), m.Data(), md.Timestamp), f); err != nil {
			return r, err
		}
		if seq >= last.Seq {
			break
		}
	}
	return r, f.done(filter, from)
}

// take applies one message of a replay or a follow to r: a claim changes
// the owner (claims.go's rule), the owner's round hands its records over,
// anything else is dropped and counted.
func (s *Store) take(r *Replayed, m Msg, f *markFilter) error {
	r.Messages++
	if !m.Valid || !m.Fenced {
		r.Dropped++
		s.refuse(RefusedUnfenced)
		return nil
	}
	if m.Claim {
		now, why := next(Claim{Node: r.Owner, Epoch: r.Epoch}, m)
		if why != "" {
			r.Dropped++
			s.refuse(RefusedClaim)
			return nil
		}
		r.Owner, r.Epoch = now.Node, now.Epoch
		r.Claims++
		return nil
	}
	drop := m.Node != r.Owner
	if drop {
		r.Dropped++
		s.refuse(RefusedNotOwner)
	}
	for off := 0; off < len(m.Data); {
		rec, n, err := journal.Decode(m.Data[off:])
		if err != nil {
			return fmt.Errorf("jsjournal: %s, message %d of gateway %d, offset %d: %w", s.l.SetFilter(m.Set), m.Seq, m.Node, off, err)
		}
		off += n
		if drop {
			r.DroppedRecords++
			continue
		}
		handed, err := f.take(rec)
		if err != nil {
			return err
		}
		if handed {
			r.Records++
		}
	}
	return nil
}

// markFilter skips each snapshot producer's records up to its mark, and
// every mark.
type markFilter struct {
	id     uint64
	marked map[uint16]bool // the snapshot's producers: true once their mark is read
	fn     func(journal.Record) error
}

func newMarkFilter(from Snapshot, fn func(journal.Record) error) *markFilter {
	f := &markFilter{id: from.ID, marked: map[uint16]bool{}, fn: fn}
	for _, p := range from.Parts {
		f.marked[p.PID] = false
	}
	return f
}

// take hands rec to fn unless the snapshot holds it or it is a mark.
func (f *markFilter) take(rec journal.Record) (bool, error) {
	seen, inSnapshot := f.marked[rec.PID]
	if rec.Type == journal.RecMark {
		if inSnapshot && !seen && len(rec.Payload) == 8 && binary.BigEndian.Uint64(rec.Payload) == f.id {
			f.marked[rec.PID] = true
		}
		return false, nil
	}
	if inSnapshot && !seen {
		return false, nil
	}
	return true, f.fn(rec)
}

// done refuses a replay that did not find the mark of every producer of the
// snapshot: its later records would all have been skipped.
func (f *markFilter) done(subject string, from Snapshot) error {
	var missing []uint16
	for pid, seen := range f.marked {
		if !seen {
			missing = append(missing, pid)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return fmt.Errorf("jsjournal: %s: %w: no mark of snapshot %d by producers %v from message %d on", subject, journal.ErrMissing, from.ID, missing, from.Seq)
}
