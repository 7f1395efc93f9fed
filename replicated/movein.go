package replicated

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/placement"
)

// A move's target (move.go has the protocol): it follows the SET while
// its source serves, then reads up to the source's last message, claims the
// SET right after it and serves it.

// blank makes set's state object blank for a load: renewed if it ran,
// loaded or followed here before (the placement says).
func (r *SETs) blank(set int) error {
	rd, _ := r.stepReady(placement.Blank{Set: set})
	for _, set := range rd.Renew {
		if err := r.host.Renew(set); err != nil {
			return err
		}
	}
	return nil
}

// prepareIn follows SET set, run by gateway from, until it has caught up.
func (r *SETs) prepareIn(set, from int) error {
	if err := r.step(placement.PrepareIn{Set: set, From: from, Owner: r.owners.Of(set), Now: time.Now()}); err != nil {
		return err
	}
	if err := r.follow(set); err != nil {
		r.step(placement.InEnded{Set: set})
		return err
	}
	return nil
}

// caughtUpIn hands f, caught up with set's source, to the move in: an
// error if the move was given up meanwhile (f is then stopped).
func (r *SETs) caughtUpIn(set int, f *jsjournal.Follower) error {
	r.mu.Lock()
	_, err := r.stepReady(placement.CaughtUp{Set: set}) // asks nothing of the driver
	if err == nil {
		r.incoming[set] = f
	}
	r.mu.Unlock()
	if err != nil {
		f.Stop()
	}
	return err
}

// follow loads set and follows its records for a move in, caught up with the
// subject's last message when it returns.
func (r *SETs) follow(set int) error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareWait)
	defer cancel()
	if f := r.takeStandby(set); f != nil {
		// Its standby follows it already: caught up, it is the move's.
		err := r.caughtUp(ctx, set, f)
		if err == nil {
			return r.caughtUpIn(set, f)
		}
		f.Stop()
		r.cfg.Log.Info("following a SET: its standby did not catch up; loading it again", "set", set, "err", err)
	}
	for attempt := 1; ; attempt++ {
		if err := r.blank(set); err != nil {
			return err
		}
		f, err := r.followOnce(ctx, set)
		if err == nil {
			return r.caughtUpIn(set, f)
		}
		// A snapshot put while it caught up purged records it had not
		// read (ErrGap), or JetStream was slow: start again from the newest
		// snapshot, on a blank state.
		if attempt == followAttempts || ctx.Err() != nil {
			return err
		}
		r.cfg.Log.Info("following a SET: starting again", "set", set, "attempt", attempt, "err", err)
	}
}

// followAttempts bounds the starts of a follow during its prepare.
const followAttempts = 3

// followOnce loads set into its blank state object and follows it until it
// has applied every message appended before the call.
func (r *SETs) followOnce(ctx context.Context, set int) (*jsjournal.Follower, error) {
	load, apply := restorer(r.host.SET(set))
	f, err := r.store.Follow(ctx, set, load, apply)
	if err != nil {
		return nil, err
	}
	if err := r.caughtUp(ctx, set, f); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

// caughtUp waits until f has applied every message of set appended before
// the call.
func (r *SETs) caughtUp(ctx context.Context, set int, f *jsjournal.Follower) error {
	last, err := r.store.Last(ctx, set)
	if err != nil {
		return err
	}
	return f.WaitApplied(ctx, last.Seq)
}

// abortIn drops a move in of set, if any and not switching.
func (r *SETs) abortIn(set int, why string) {
	r.step(placement.AbortIn{Set: set, Why: why})
}

// switchIn takes set over from gateway from, whose last message of the SET
// is last: read up to it, the claim appended right after it, and the SET
// served.
func (r *SETs) switchIn(set, from int, last uint64) (MoveResult, error) {
	res := MoveResult{Set: set, To: r.cfg.Name, LastSeq: last}
	followed := r.state(set).Since // the move in began then
	r.mu.Lock()
	_, err := r.stepReady(placement.SwitchIn{Set: set, From: from}) // asks nothing of the driver
	f := r.incoming[set]
	if err == nil {
		delete(r.incoming, set) // the switch's: the claims leave it be
	}
	r.mu.Unlock()
	if err != nil {
		return res, fmt.Errorf("SET %d is not followed here for gateway %d", set, from)
	}
	defer r.step(placement.InEnded{Set: set})
	ctx, cancel := context.WithTimeout(context.Background(), switchWait)
	defer cancel()
	err = f.WaitApplied(ctx, last)
	rep, serr := f.Stop()
	if err = errors.Join(err, serr); err != nil {
		return res, err
	}
	if rep.LastSeq != last {
		return res, fmt.Errorf("SET %d: read up to message %d; the source's last is %d", set, rep.LastSeq, last)
	}
	was := r.owners.Get(set)
	if was.Node != from {
		return res, fmt.Errorf("SET %d's last claim is gateway %d's, not the source %d's", set, was.Node, from)
	}
	// The claim goes right after the source's last message, or not at all.
	c, err := r.owners.Claim(ctx, set, was.Epoch, last)
	if err != nil {
		return res, err
	}
	res.From, res.Epoch = was.Name, c.Epoch
	r.owned(set, c)
	seq := c.Seq
	if h := testSwitchHook.Load(); h != nil {
		(*h)("claimed")
	}
	if err := r.serve(set, seq); err != nil {
		// The claim names this gateway, which cannot serve the SET: hand
		// it back, for the others (its source first) to take.
		if rerr := r.owners.Release(ctx, set, c.Epoch, seq); rerr != nil {
			r.step(placement.Failed{Set: set, Why: fmt.Sprintf("taking SET %d over failed (%v), and handing it back too (%v)", set, err, rerr)})
		}
		return res, err
	}
	res.ClaimSeq = seq
	r.takeovers.Add(1)
	r.cfg.Log.Info("serving SET", "set", set, "epoch", c.Epoch, "was", was.Name, "moved", true, "claim_seq", seq,
		"records_followed", rep.Records, "followed_for", time.Since(followed).Round(time.Millisecond))
	return res, nil
}

// serve starts SET set, loaded here, after its claim at message seq: its
// journal group opened, its ring started, the bus routed to it.
func (r *SETs) serve(set int, seq uint64) error {
	st := r.host.SET(set)
	if sum := ledger.Sum([]*ledger.Ledger{st.Ledger()}); sum.Check() != nil {
		return fmt.Errorf("SET %d as loaded does not balance: %w", set, sum.Check())
	}
	if err := r.host.Journal().Reopen(set, seq); err != nil {
		return err
	}
	r.host.Serving(set)
	// Started before it is routed here: nothing reads a ring's state
	// (metrics, the ticker) before it runs.
	if err := st.Transport().Start(); err != nil {
		return err
	}
	r.step(placement.Served{Set: set})
	r.host.Bus().Route(set, st.Transport(), false)
	return nil
}
