package replicated

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/stages"
)

// Snapshot puts snapshot id of every SET run here to JetStream, purging
// what it makes useless: the SETs mark their journal on their goroutines
// (a KSnapshot event) and hand in their
// state on parts (setOf names the SET of a journal producer), kept once
// both marks are durable. It returns how many SETs and bytes it put.
func (r *SETs) Snapshot(id uint64, in <-chan stages.Part, setOf func(pid uint16) int) (int, int, error) {
	j, bus := r.host.Journal(), r.host.Bus()
	var sets []int
	retired := map[int]uint8{}
	telling := r.Telling()
	for set := range r.cfg.Sets {
		if _, ok := telling[set]; !ok || j.GroupErr(set) != nil {
			continue
		}
		// Its rounds go to a new generation from here: every message of
		// the one retired comes before the marks, so the snapshot after
		// next makes it useless whole (Compact below).
		gen, err := j.RotateGroup(set)
		if err != nil {
			continue
		}
		retired[set] = gen
		rg := bus.Ring(set)
		seq, err := rg.Claim(1)
		if err != nil {
			continue
		}
		*rg.At(seq) = event.Event{Kind: event.KSnapshot, Env: id}
		rg.Publish(seq, seq)
		sets = append(sets, set)
	}
	parts := map[int][]stages.Part{}
	timeout := time.After(time.Minute)
	for got := 0; got < 2*len(sets); {
		select {
		case p := <-in:
			if p.ID == id {
				set := setOf(p.PID)
				parts[set] = append(parts[set], p)
				got++
			}
		case <-timeout:
			return 0, 0, errors.New("snapshot: the SETs did not hand in their state within a minute")
		}
	}
	var errs []error
	bytes := 0
	for _, set := range sets {
		snap := jsjournal.Snapshot{ID: id, Owner: r.Node(), Epoch: telling[set].Epoch, ClaimSeq: telling[set].ClaimSeq}
		for _, p := range parts[set] {
			if err := j.Wait(p.PID, p.Pos); err != nil {
				errs = append(errs, err)
				snap.Seq = 0
				break
			}
			at, ok := j.MarkSeq(p.PID, id)
			if !ok {
				errs = append(errs, fmt.Errorf("snapshot: SET %d: producer %d's mark is not durable", set, p.PID))
				snap.Seq = 0
				break
			}
			if snap.Seq == 0 || at < snap.Seq {
				snap.Seq = at
			}
			snap.Parts = append(snap.Parts, jsjournal.Part{PID: p.PID, Data: p.Data})
			bytes += len(p.Data)
		}
		if snap.Seq == 0 || j.GroupErr(set) != nil {
			continue // lost meanwhile: the new owner's snapshots are its own
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.PutSnapshot(ctx, set, snap)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// The generation retired at the snapshot before: everything in it
		// precedes that one, which a reader a snapshot behind may still
		// read from; this one's is kept for the next.
		if err := j.Compact(set, retired[set]+journal.Gens-1); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: compacting SET %d: %w", set, err))
		}
	}
	return len(sets), bytes, errors.Join(errs...)
}
