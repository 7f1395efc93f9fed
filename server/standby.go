package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"hongbao/cluster"
	"hongbao/jsjournal"
)

// Standbys (-standby, on by default): every gateway follows the records of
// the SETs it would claim should their owner die alone (cluster.Standbys)
// as they are appended, as LMAX's replica does. A takeover then reads the
// few messages since its standby's last instead of loading the SET's
// snapshot and replaying the tail after it: a failover costs the lease and
// little else (docs/DESIGN.md, Standbys). A standby that fails is dropped
// and started again; a takeover without one loads the SET from JetStream.

// standby is a SET followed here while another gateway runs it.
type standby struct {
	ready    chan struct{} // closed once started: f set, or err
	cancel   context.CancelFunc
	f        *jsjournal.Follower
	err      error
	unwanted time.Time // since when cluster.Standbys no longer gives it here; zero while it does
}

const (
	// standbyStart bounds a standby's start: its snapshot's load.
	standbyStart = 30 * time.Second
	// standbyCatchUp bounds a takeover's wait for its standby to read up to
	// the claim, after which it loads the SET from JetStream instead.
	standbyCatchUp = 2 * time.Second
	// standbySettle and standbyLinger damp the standbys' churn while SETs
	// move: each start loads a snapshot.
	standbySettle = time.Second
	standbyLinger = 30 * time.Second
)

// standBy makes the SETs followed here those cluster.Standbys gives this
// gateway for owner, each SET's owner of the moment, and starts one more at
// a time on a goroutine of its own (a start loads a snapshot). Moves shift
// the assignment back and forth, so a SET is started only once it has been
// wanted for standbySettle and no move of this gateway's is under way, and
// one no longer wanted lingers for standbyLinger before it is dropped;
// those that stopped on an error go at once.
func (r *replicated) standBy(owner []int) {
	var want []int
	on := !r.s.opts.NoStandby && !r.leaving.Load()
	live := r.s.node.Heard()
	if on {
		want = cluster.Standbys(owner, live, r.s.node.Takers(), r.node)
	}
	now := time.Now()
	for _, set := range want {
		if _, ok := r.wanted[set]; !ok {
			r.wanted[set] = now
		}
	}
	for set := range r.wanted {
		if !slices.Contains(want, set) {
			delete(r.wanted, set)
		}
	}
	var drop []int
	var stop []*jsjournal.Follower
	starting := false
	r.mu.Lock()
	for set, sb := range r.standby {
		select {
		case <-sb.ready:
		default:
			starting = true
			continue
		}
		stopped := sb.err == nil && sb.f.Stopped() // on an error: Stop says which
		// A SET whose owner went unheard keeps its standby until someone
		// claims it: that is what the standby is for.
		switch {
		case slices.Contains(want, set) || on && !slices.Contains(live, owner[set]):
			sb.unwanted = time.Time{}
		case sb.unwanted.IsZero():
			sb.unwanted = now
		}
		if sb.err != nil || stopped || !on || !sb.unwanted.IsZero() && now.Sub(sb.unwanted) > standbyLinger {
			delete(r.standby, set)
			drop = append(drop, set)
			if sb.f != nil {
				stop = append(stop, sb.f)
			}
			if stopped {
				r.standbyDrops.Add(1)
			}
		}
	}
	next := -1
	if !starting && len(r.moving) == 0 && len(r.incoming) == 0 {
		for _, set := range want {
			if now.Sub(r.wanted[set]) >= standbySettle && r.standby[set] == nil && !r.active[set].Load() {
				next = set
				break
			}
		}
	}
	var sb *standby
	var ctx context.Context
	if next >= 0 {
		sb = &standby{ready: make(chan struct{})}
		ctx, sb.cancel = context.WithTimeout(context.Background(), standbyStart)
		r.standby[next] = sb
	}
	r.mu.Unlock()
	for i, f := range stop {
		if _, err := f.Stop(); err != nil {
			r.s.log.Warn("standby of a SET stopped: started again", "set", drop[i], "err", err)
		}
	}
	if sb != nil {
		go r.startStandby(ctx, next, sb)
	}
}

// startStandby loads set's snapshot into its blank state object and follows
// its records into it.
func (r *replicated) startStandby(ctx context.Context, set int, sb *standby) {
	defer close(sb.ready)
	defer sb.cancel()
	if sb.err = r.blank(set); sb.err != nil {
		return
	}
	start := time.Now()
	load, apply := restorer(r.s.setAt(set))
	if sb.f, sb.err = r.store.Follow(ctx, set, load, apply); sb.err != nil {
		r.standbyDrops.Add(1)
		r.s.log.Warn("starting the standby of a SET failed: tried again at a later heartbeat", "set", set, "err", sb.err)
		return
	}
	r.s.log.Info("standby of a SET: following it", "set", set, "owner", r.s.node.NameOf(r.owners.Of(set)), "loaded_in", time.Since(start).Round(time.Millisecond))
}

// takeStandby removes set's standby and returns its Follower once started:
// nil if there is none, or it did not start. The Follower is the caller's.
func (r *replicated) takeStandby(set int) *jsjournal.Follower {
	r.mu.Lock()
	sb := r.standby[set]
	delete(r.standby, set)
	r.mu.Unlock()
	if sb == nil {
		return nil
	}
	<-sb.ready
	return sb.f // nil if it did not start
}

// fromStandby brings set's standby, if it has one, up to message seq (the
// claim of its takeover) and stops it: the SET's state object then holds
// every record up to seq. False if it had none, or it could not: the SET is
// then loaded from JetStream on a blank state object.
func (r *replicated) fromStandby(ctx context.Context, set int, seq uint64) (jsjournal.Replayed, bool) {
	f := r.takeStandby(set)
	if f == nil {
		return jsjournal.Replayed{}, false
	}
	wctx, cancel := context.WithTimeout(ctx, standbyCatchUp)
	err := f.WaitApplied(wctx, seq)
	cancel()
	rep, serr := f.Stop()
	if err = errors.Join(err, serr); err == nil && rep.LastSeq != seq {
		err = errors.New("it read past the claim")
	}
	if err != nil {
		r.standbyDrops.Add(1)
		r.s.log.Warn("the standby of a SET could not take it over: it is loaded from JetStream", "set", set, "err", err)
		return rep, false
	}
	r.standbyTakes.Add(1)
	return rep, true
}

// standbys is how many SETs are followed here as standbys, started or not.
func (r *replicated) standbys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.standby)
}

// stopStandbys stops every standby, at the gateway's stop: those starting
// give up their load.
func (r *replicated) stopStandbys() {
	r.mu.Lock()
	sets := make([]int, 0, len(r.standby))
	for set, sb := range r.standby {
		sets = append(sets, set)
		sb.cancel()
	}
	r.mu.Unlock()
	for _, set := range sets {
		if f := r.takeStandby(set); f != nil {
			f.Stop()
		}
	}
}
