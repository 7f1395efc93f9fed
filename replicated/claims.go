package replicated

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/placement"
	"github.com/hongbao-io/hongbao/set"
)

// The claims: every heartbeat the placement is ticked with what this
// gateway hears, and the SETs it gives this gateway are claimed, loaded and
// served.

// claims runs until stop: every heartbeat, it ticks the placement with
// what this gateway hears and carries out its answer — claims of the SETs
// whose owner is gone, and of those an earlier process of its node's held,
// standbys, a rebalancing move.
func (r *SETs) claims() {
	defer close(r.done)
	t := time.NewTicker(placement.Beat)
	defer t.Stop()
	r.step(placement.Start{Now: time.Now()})
	for {
		select {
		case <-r.stop:
			return
		case <-r.lost:
			return
		case <-t.C:
		}
		// The clock, not the tick's time: the tick that waited in the
		// channel through a pause carries the time it paused.
		tick := placement.Tick{Now: time.Now(), Live: r.live(), Heard: r.host.Node().Heard(), Takers: r.host.Node().Takers(),
			Owner: make([]placement.Owner, r.cfg.Sets), Stopped: r.stoppedStandbys()}
		// A gateway claims only while it can show that NATS carries for it
		// (liveness.go): one that hears nobody must not conclude that
		// everybody else is dead.
		tick.Current = !r.fenced.Load() && r.notCurrent(r.currentWithin()) == ""
		for set := range tick.Owner {
			tick.Owner[set] = ownerOf(r.owners.Get(set))
		}
		rd, _ := r.stepReady(tick)
		if rd.Lost != nil {
			r.lose(rd.Lost)
			return
		}
		if !r.takeAll(rd.Take) {
			return // a claim may name this gateway, which cannot serve it: stop
		}
		r.carryOut(rd)
	}
}

// maxTakes bounds the SETs taken at once.
const maxTakes = 8

// snapshotAfterReplay: takes that replayed more messages than this are
// followed by a snapshot at once, so that a SET that moves often is not
// replayed from ever further back.
const snapshotAfterReplay = 1000

// takeAll takes sets, several at once: a take waits mostly on JetStream's
// round trips, so one SET's need not delay the next. It is false once a
// take failed (the gateway stops) or the claims stop.
func (r *SETs) takeAll(sets []int) bool {
	var wg sync.WaitGroup
	var failed atomic.Bool
	slots := make(chan struct{}, maxTakes)
	defer wg.Wait()
	for _, set := range sets {
		select {
		case <-r.stop:
			return false
		case slots <- struct{}{}:
		}
		if failed.Load() {
			return false
		}
		// A claim before it can take seconds: the SET may have found a
		// live owner since the list was made.
		if o := r.owners.Of(set); o >= 0 && o != r.cfg.Node && slices.Contains(r.live(), o) {
			<-slots
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := r.take(set); err != nil {
				r.takeFailures.Add(1)
				r.cfg.Log.Error("claiming a SET failed; the others take it once this gateway's claim lapses", "set", set, "err", err)
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if r.replayed.Swap(0) > snapshotAfterReplay {
		select {
		case r.snapNow <- struct{}{}:
		default:
		}
	}
	return !failed.Load()
}

// take claims set, fencing its old owner, loads it and serves it. An error
// after the claim stops the gateway (lose): the claim names this gateway.
func (r *SETs) take(set int) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	was := r.owners.Get(set)
	if was.Node >= 0 && was.Node != r.cfg.Node {
		// Unheard is not dead: under load a gateway's heartbeats can come
		// late while it serves. One that appended to the SET within the
		// lease (by the NATS server's clock, against this one's) is alive.
		if last, err := r.store.Last(ctx, set); err == nil && last.Valid && last.Fenced && !last.Claim && last.Node == was.Node &&
			time.Since(last.Time) < r.cfg.Lease {
			r.deferred.Add(1)
			return nil
		}
	}
	// The claim is appended after the SET's last message, which fences the
	// old owner: its next append is refused. It supersedes was only: a SET
	// another survivor claimed meanwhile is not taken from it.
	c, err := r.owners.Claim(ctx, set, was.Epoch, 0)
	if errors.Is(err, jsjournal.ErrClaimLost) {
		r.claimsLost.Add(1)
		return nil
	}
	if err != nil {
		r.cfg.Log.Warn("claiming a SET: JetStream refused; retried at the next heartbeat", "set", set, "err", err)
		return nil // nothing changed: the SET is not this gateway's
	}
	r.owned(set, c)
	claimed := time.Now()
	fail := func(err error) error {
		r.step(placement.Failed{Set: set, Why: err.Error()}) // its claim names this gateway: it stops
		return err
	}
	seq := c.Seq
	rep, standing := r.fromStandby(ctx, set, seq)
	if !standing {
		if err := r.blank(set); err != nil {
			return fail(err)
		}
		load, apply := restorer(r.host.SET(set))
		if rep, err = r.store.Load(ctx, set, load, apply); err != nil {
			return fail(fmt.Errorf("loading SET %d: %w", set, err))
		}
		r.replayed.Add(int64(rep.Messages))
	}
	if rep.LastSeq != seq {
		return fail(fmt.Errorf("SET %d: appended to after this gateway's claim (message %d, the claim %d)", set, rep.LastSeq, seq))
	}
	loaded := time.Now()
	if err := r.serve(set, seq); err != nil {
		return fail(err)
	}
	took := time.Since(start)
	r.takeovers.Add(1)
	r.takeoverNs.Store(int64(took))
	r.cfg.Log.Info("serving SET", "set", set, "epoch", c.Epoch, "was", was.Name, "standby", standing, "snapshot_seq", rep.Snapshot,
		"messages_replayed", rep.Messages, "records_replayed", rep.Records, "dropped", rep.Dropped, "claim_seq", seq, "took", took.Round(time.Microsecond),
		"claiming", claimed.Sub(start).Round(time.Microsecond), "loading", loaded.Sub(claimed).Round(time.Microsecond))
	return nil
}

// owned notes that this gateway's claim c of set went through: its epoch,
// which its appends are fenced against, and its sequence, which its
// snapshots name. A move in of it, if any and not switching, is dropped.
func (r *SETs) owned(set int, c jsjournal.Claim) {
	r.step(placement.Claimed{Set: set, Epoch: c.Epoch, Seq: c.Seq, Name: r.cfg.Name})
	r.store.Own(set, c.Epoch)
}

// restorer returns what restores SET st from JetStream: its snapshot's
// parts, then its records, each at the time it is applied (a standby
// applies them as they come); either refuses another SET's.
func restorer(st *set.SET) (func(jsjournal.Snapshot) error, func(journal.Record) error) {
	set := st.Index()
	load := func(snap jsjournal.Snapshot) error {
		now := time.Now().UnixNano()
		for _, p := range snap.Parts {
			if ok, err := st.Load(p.PID, p.Data, now); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("a part of journal producer %d, which is not SET %d's", p.PID, set)
			}
		}
		return nil
	}
	apply := func(rec journal.Record) error {
		if ok, err := st.Apply(rec, time.Now().UnixNano()); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("a record of journal producer %d, which is not SET %d's", rec.PID, set)
		}
		return nil
	}
	return load, apply
}
