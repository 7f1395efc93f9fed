package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// ErrGap is a Follower's error when a message of its group was purged
// before it read it (it fell a snapshot behind): what it applied is not
// whole, so its state is dropped and loaded again.
var ErrGap = errors.New("jsjournal: a message of the group was purged before the follower read it")

// Follower keeps a group's state current on a gateway that does not own it,
// as LMAX's replica does: it loaded the newest snapshot and applies every
// record appended after it as it is appended, so that taking the group over
// costs the tail it has not read yet rather than a whole replay. It applies
// on its own goroutine; Stop ends it, after which the state is the caller's.
type Follower struct {
	s      *Store
	group  int
	cancel context.CancelFunc
	done   chan struct{}

	applied atomic.Uint64 // the last message of the group read (applied, or dropped)

	mu     sync.Mutex
	cond   *sync.Cond
	r      Replayed
	from   Snapshot
	filter *markFilter
	err    error // why it stopped, once done
}

// Follow loads group's newest snapshot into restore (if there is one) and
// applies each record after it to fn as Replay does, then goes on applying
// what is appended, until Stop or an error (WaitApplied and Stop return
// it). fn runs on the Follower's goroutine; payloads alias the messages.
func (s *Store) Follow(ctx context.Context, group int, restore func(Snapshot) error, fn func(journal.Record) error) (*Follower, error) {
	snap, ok, err := s.getSnapshot(ctx, group)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := restore(snap); err != nil {
			return nil, fmt.Errorf("jsjournal: restoring %s from its snapshot at %d: %w", s.l.SetFilter(group), snap.Seq, err)
		}
	}
	cons, it, err := s.readFrom(ctx, group, snap.Seq)
	if err != nil {
		return nil, fmt.Errorf("jsjournal: following %s: %w", s.l.SetFilter(group), err)
	}
	fctx, cancel := context.WithCancel(context.Background())
	r := Replayed{Owner: -1, Snapshot: snap.Seq}
	if ok {
		r.Owner, r.Epoch = snap.Owner, snap.Epoch
	}
	f := &Follower{s: s, group: group, cancel: cancel, done: make(chan struct{}), r: r, from: snap, filter: newMarkFilter(snap, fn)}
	f.cond = sync.NewCond(&f.mu)
	go f.run(fctx, it, cons)
	return f, nil
}

// run applies the messages until ctx ends or one fails.
func (f *Follower) run(ctx context.Context, it jetstream.MessagesContext, cons jetstream.Consumer) {
	subject, from, filter := f.s.l.SetFilter(f.group), f.from, f.filter
	var prev uint64 // the group's message before this one, as read
	err := func() error {
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return err
			}
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := md.Sequence.Stream
			if prev == 0 && from.Seq != 0 && seq != from.Seq {
				return ErrGap // the snapshot's first message was purged: a newer one holds it
			}
			msg := f.s.parseMsg(m.Subject(), seq, m.Headers(), m.Data(), md.Timestamp)
			// A message names the one it was appended after: one that does
			// not follow the last read means some were compacted unread.
			if msg.Fenced && msg.After != prev && (prev != 0 || from.Seq == 0) {
				return fmt.Errorf("%w: %s: message %d follows %d, read %d", ErrGap, subject, seq, msg.After, prev)
			}
			f.mu.Lock()
			err = f.s.take(&f.r, msg, filter)
			f.r.LastSeq = seq
			if err == nil {
				f.applied.Store(seq)
				f.cond.Broadcast()
			}
			f.mu.Unlock()
			if err != nil {
				return err
			}
			prev = seq
		}
	}()
	f.s.dropReader(cons, it)
	if ctx.Err() != nil {
		err = nil // stopped
	}
	f.mu.Lock()
	f.err = err
	f.cond.Broadcast()
	f.mu.Unlock()
	close(f.done)
}

// Stopped reports whether the Follower stopped by itself, on an error
// (Stop returns it), or was stopped.
func (f *Follower) Stopped() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Applied is the last message of the group the Follower read.
func (f *Follower) Applied() uint64 { return f.applied.Load() }

// WaitApplied waits until the Follower has read the group's message seq, or
// ctx ends, or it stopped: nil once it has.
func (f *Follower) WaitApplied(ctx context.Context, seq uint64) error {
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.cond.Broadcast()
		f.mu.Unlock()
	})
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.applied.Load() < seq {
		select {
		case <-f.done:
			if f.err != nil {
				return f.err
			}
			return fmt.Errorf("jsjournal: the follower of %s stopped at message %d, before %d", f.s.l.SetFilter(f.group), f.applied.Load(), seq)
		default:
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("jsjournal: the follower of %s at message %d, waiting for %d: %w", f.s.l.SetFilter(f.group), f.applied.Load(), seq, err)
		}
		f.cond.Wait()
	}
	return nil
}

// Stop ends the Follower and waits for it: what it applied stays applied.
// It returns what it read, and why it had stopped before, if it had, or
// that it never met the mark of a producer of its snapshot (every later
// record of that producer skipped).
func (f *Follower) Stop() (Replayed, error) {
	f.cancel()
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil && f.r.Messages > 0 {
		return f.r, f.filter.done(f.s.l.SetFilter(f.group), f.from)
	}
	return f.r, f.err
}
