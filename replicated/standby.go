package replicated

import (
	"context"
	"errors"
	"time"

	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/placement"
)

// Standbys (-standby, on by default): every gateway follows the records of
// the SETs it would claim should their owner die alone (placement.Standbys)
// as they are appended, as LMAX's replica does. A takeover then reads the
// few messages since its standby's last instead of loading the SET's
// snapshot and replaying the tail after it: a failover costs the lease and
// little else (docs/DESIGN.md, Standbys). A standby that fails is dropped
// and started again; a takeover without one loads the SET from JetStream.

// standby is the Follower of a SET followed here while another gateway
// runs it; its state is the placement's (placement.Standby).
type standby struct {
	ready  chan struct{} // closed once started: f set, or err
	cancel context.CancelFunc
	f      *jsjournal.Follower
	err    error
}

const (
	// standbyStart bounds a standby's start: its snapshot's load.
	standbyStart = 30 * time.Second
	// standbyCatchUp bounds a takeover's wait for its standby to read up to
	// the claim, after which it loads the SET from JetStream instead.
	standbyCatchUp = 2 * time.Second
)

// startStandby starts the standby of set the placement asked for, on a
// goroutine of its own: it loads set's snapshot into its blank state object
// and follows its records into it.
func (r *SETs) startStandby(set int) {
	sb := &standby{ready: make(chan struct{})}
	var ctx context.Context
	ctx, sb.cancel = context.WithTimeout(context.Background(), standbyStart)
	r.mu.Lock()
	r.standby[set] = sb
	r.mu.Unlock()
	go func() {
		defer sb.cancel()
		start := time.Now()
		if sb.err = r.blank(set); sb.err == nil {
			load, apply := restorer(r.host.SET(set))
			if sb.f, sb.err = r.store.Follow(ctx, set, load, apply); sb.err != nil {
				r.standbyDrops.Add(1)
				r.cfg.Log.Warn("starting the standby of a SET failed: tried again at a later heartbeat", "set", set, "err", sb.err)
			}
		}
		if sb.err != nil {
			r.mu.Lock()
			if r.standby[set] == sb {
				delete(r.standby, set)
			}
			r.mu.Unlock()
		}
		close(sb.ready)
		r.step(placement.StandbyStarted{Set: set, Err: sb.err})
		if sb.err == nil {
			r.cfg.Log.Info("standby of a SET: following it", "set", set, "owner", r.host.Node().NameOf(r.owners.Of(set)), "loaded_in", time.Since(start).Round(time.Millisecond))
		}
	}()
}

// stoppedStandbys are the standbys started whose follow stopped on its
// own: the placement drops them, to start them again.
func (r *SETs) stoppedStandbys() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for set, sb := range r.standby {
		select {
		case <-sb.ready:
			if sb.err == nil && sb.f.Stopped() {
				out = append(out, set)
			}
		default:
		}
	}
	return out
}

// dropFollow stops a follow the placement dropped: a standby, or a move in.
func (r *SETs) dropFollow(d placement.Drop) {
	if d.Role == placement.MovingIn {
		r.mu.Lock()
		f := r.incoming[d.Set]
		delete(r.incoming, d.Set)
		r.mu.Unlock()
		if f != nil {
			f.Stop()
			r.cfg.Log.Info("following a SET dropped", "set", d.Set, "why", d.Why)
		}
		return
	}
	f := r.takeStandby(d.Set)
	if d.Failed {
		r.standbyDrops.Add(1)
	}
	if f == nil {
		return
	}
	if _, err := f.Stop(); err != nil {
		r.cfg.Log.Warn("standby of a SET stopped: started again", "set", d.Set, "err", err)
	}
}

// takeStandby removes set's standby and returns its Follower once started:
// nil if there is none, or it did not start. The Follower is the caller's.
func (r *SETs) takeStandby(set int) *jsjournal.Follower {
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
func (r *SETs) fromStandby(ctx context.Context, set int, seq uint64) (jsjournal.Replayed, bool) {
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
		r.cfg.Log.Warn("the standby of a SET could not take it over: it is loaded from JetStream", "set", set, "err", err)
		return rep, false
	}
	r.standbyTakes.Add(1)
	return rep, true
}

// stopStandbys stops every standby, at the gateway's stop: those starting
// give up their load.
func (r *SETs) stopStandbys() {
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
