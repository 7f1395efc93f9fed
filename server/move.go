package server

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"hongbao/event"
	"hongbao/jsjournal"
	"hongbao/ledger"
	"hongbao/placement"
	"hongbao/proto"
)

// Moving a SET on purpose (-journal jetstream): its owner, the source,
// hands it to another gateway, the target, while both serve.
//
//  1. Prepare: the target loads the SET's snapshot and follows its records
//     as the source appends them (jsjournal.Follower), until it has caught
//     up. The source serves all along.
//  2. Cut: the source stops taking the SET's requests (event.Bus.SetLeaving:
//     they are answered "overloaded", which says "retry"; logins get
//     LOGIN_ACK 3 with no address), answers its users' crossings still
//     waiting "unavailable", sends its connections ERROR 9 (every request
//     they sent before it was answered, but for an OPEN whose answer from
//     another gateway was on its way: a repeated OPEN tells its share),
//     waits for them to go, takes
//     the SET off its bus and lets its ring drain, makes the SET's last
//     round durable and closes its journal group there: L, the SET's last
//     message, is final.
//  3. Switch: the target reads up to L, appends its claim right after L
//     (epoch + 1), or not at all, and serves. The clients, logging in
//     anywhere, are sent to it.
//
// The pause — no SET requests served by anyone — runs from the cut to the
// target serving: a round on JetStream, the claim. A move that fails before
// the claim leaves the SET with its source, which takes it again from
// JetStream if it had cut it; one that fails after it leaves it with the
// target, or, if the target dies, to the others after its lease: never
// both, never neither for longer.

// Errors of a move.
var (
	errMoveBusy      = placement.ErrMoveBusy
	errNotReplicated = errors.New("SETs move only between gateways whose journal is on JetStream (-journal jetstream)")
	errNoTaker       = errors.New("no other gateway takes SETs now")
)

// MoveResult is a move's outcome, the answer of POST /sets/{s}/move.
type MoveResult struct {
	Set   int    `json:"set"`
	From  string `json:"from"`
	To    string `json:"to"`
	Epoch uint64 `json:"epoch"` // the target's, in the SET's record
	// LastSeq is the SET's last message from the source; ClaimSeq the
	// target's claim after it.
	LastSeq  uint64 `json:"last_seq"`
	ClaimSeq uint64 `json:"claim_seq"`
	// PrepareMs: the target loading the SET and catching up, while the
	// source served. PauseMs: from the source refusing the SET's requests
	// to the target serving it. Of the pause, CutMs is the source's part
	// (its connections gone, its last round durable), SwitchMs the
	// target's (the last records read, the record moved, the claim).
	PrepareMs float64 `json:"prepare_ms"`
	PauseMs   float64 `json:"pause_ms"`
	CutMs     float64 `json:"cut_ms"`
	SwitchMs  float64 `json:"switch_ms"`
}

// MoveStatus is a move in flight in GET /cluster.
type MoveStatus struct {
	Set     int     `json:"set"`
	From    string  `json:"from"`
	To      string  `json:"to"`
	Phase   string  `json:"phase"` // preparing, cutting, switching (the source's); following (the target's)
	SinceMs float64 `json:"since_ms"`
}

// moveOp is what the gateways of a move tell each other, signed with the
// admin token as campaign ops are (moving SETs takes the admin's
// authority, not a NATS user's alone).
type moveOp struct {
	Op   string `json:"op"` // move (to the owner, from an admin request elsewhere), prepare, switch, abort
	From int    `json:"from"`
	Set  int    `json:"set"`
	To   string `json:"to,omitempty"`   // move: the target's name
	Last uint64 `json:"last,omitempty"` // switch: the SET's last message
}

// moveAnswer is the answer to a moveOp.
type moveAnswer struct {
	Err    string     `json:"error,omitempty"`
	Status int        `json:"status,omitempty"` // for move: the HTTP status of the error
	Result MoveResult `json:"result"`
}

// testSwitchHook, in tests, runs on the target at points of a switch
// ("claimed": its record moved here, its claim not appended yet).
var testSwitchHook atomic.Pointer[func(point string)]

// moveWait bounds each phase asked of the target.
const (
	prepareWait = time.Minute
	switchWait  = 5 * time.Second
)

// ask sends op to gateway node and decodes its answer.
func (s *Server) askMove(ctx context.Context, node int, op moveOp) (moveAnswer, error) {
	op.From = s.node.Options().Node
	b, _ := json.Marshal(op)
	signed, _ := json.Marshal(signedOp{Op: b, Proof: s.proof(b)})
	reply, err := s.node.RequestOne(ctx, node, "move", signed)
	if err != nil {
		return moveAnswer{}, err
	}
	var a moveAnswer
	if err := json.Unmarshal(reply, &a); err != nil {
		return moveAnswer{}, fmt.Errorf("gateway %d's answer: %w", node, err)
	}
	if a.Err != "" {
		return a, errors.New(a.Err)
	}
	return a, nil
}

// moveFromPeer serves another gateway's move op.
func (s *Server) moveFromPeer(from int, data []byte) []byte {
	var signed signedOp
	var op moveOp
	if json.Unmarshal(data, &signed) != nil || json.Unmarshal(signed.Op, &op) != nil {
		s.node.Refused(from, "a move op that does not decode")
		return nil
	}
	if len(s.campaignKey) > 0 && !hmac.Equal([]byte(signed.Proof), []byte(s.proof(signed.Op))) {
		s.node.Refused(from, "a move op without the proof of this gateway's -admin-token (every gateway needs the same one)")
		return nil
	}
	if op.From != from || op.Set < 0 || op.Set >= s.opts.Sets {
		s.node.Refused(from, "a move op naming another gateway, or no SET")
		return nil
	}
	r := s.repl
	var a moveAnswer
	var err error
	switch op.Op {
	case "move":
		ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
		a.Result, err = r.moveOut(ctx, op.Set, op.To)
		cancel()
		a.Status = moveStatus(err)
	case "prepare":
		err = r.prepareIn(op.Set, from)
	case "switch":
		a.Result, err = r.switchIn(op.Set, from, op.Last)
	case "abort":
		r.abortIn(op.Set, "its source gave the move up")
	default:
		s.node.Refused(from, "a move op of no known kind")
		return nil
	}
	if err != nil {
		a.Err = err.Error()
	}
	b, _ := json.Marshal(a)
	return b
}

// moveErr is an error of a move with the HTTP status it answers.
type moveErr struct {
	status int
	err    error
}

func (e *moveErr) Error() string { return e.err.Error() }
func (e *moveErr) Unwrap() error { return e.err }

func badMove(status int, format string, args ...any) error {
	return &moveErr{status, fmt.Errorf(format, args...)}
}

// moveStatus is the HTTP status of a move's error.
func moveStatus(err error) int {
	var me *moveErr
	switch {
	case err == nil:
		return 200
	case errors.As(err, &me):
		return me.status
	case errors.Is(err, errMoveBusy):
		return 409
	}
	return 503
}

// Move hands SET set, which this gateway runs, to the gateway named to:
// see the top of this file. It returns once the target serves it, or
// with the error that kept it from it.
func (r *replicated) moveOut(ctx context.Context, set int, to string) (MoveResult, error) {
	res := MoveResult{Set: set, From: r.name, To: to}
	node, ok := r.s.node.NodeNamed(to)
	if !ok {
		node = -1
	}
	start := time.Now()
	err := r.step(placement.MoveOut{Set: set, To: node, ToName: to, Taker: slices.Contains(r.s.node.Takers(), node), Now: start})
	switch {
	case err == nil:
	case errors.Is(err, placement.ErrMoveBusy):
		return res, errMoveBusy
	case errors.Is(err, placement.ErrNotHere):
		return res, badMove(409, "SET %d does not run on this gateway (%s)", set, r.name)
	case errors.Is(err, placement.ErrNoGateway):
		return res, badMove(404, "no gateway named %q is up", to)
	case errors.Is(err, placement.ErrThere):
		return res, badMove(409, "SET %d already runs on %s", set, to)
	default:
		return res, badMove(409, "gateway %s takes no SETs now (leaving, or not ready)", to)
	}
	defer r.step(placement.MoveEnded{Set: set})
	phase := func(p placement.Phase) { r.step(placement.MovePhase{Set: set, Phase: p}) }
	fail := func(err error) (MoveResult, error) {
		r.moveFailures.Add(1)
		r.s.log.Warn("moving a SET failed", "set", set, "to", to, "err", err)
		return res, err
	}

	pctx, cancel := context.WithTimeout(ctx, prepareWait)
	_, err = r.s.askMove(pctx, node, moveOp{Op: "prepare", Set: set})
	cancel()
	if err != nil {
		r.s.askMove(context.Background(), node, moveOp{Op: "abort", Set: set}) //nolint: best effort; its follow times out otherwise
		return fail(fmt.Errorf("gateway %s could not follow SET %d: %w", to, set, err))
	}
	cut := time.Now()
	res.PrepareMs = ms(cut.Sub(start))
	phase(placement.Cutting)
	last, err := r.cut(set)
	res.LastSeq = last
	if err != nil {
		// Its state may hold what never became durable: it is taken again
		// from JetStream (the record still names this gateway).
		r.s.askMove(context.Background(), node, moveOp{Op: "abort", Set: set})
		return fail(fmt.Errorf("cutting SET %d: %w", set, err))
	}
	switched := time.Now()
	res.CutMs = ms(switched.Sub(cut))
	phase(placement.Switching)
	sctx, cancel := context.WithTimeout(ctx, switchWait)
	a, err := r.s.askMove(sctx, node, moveOp{Op: "switch", Set: set, Last: last})
	cancel()
	if err != nil {
		// The record names the target if it got that far (then it serves,
		// or releases it, or its lease ends), else this gateway, which
		// takes the SET again from JetStream.
		return fail(fmt.Errorf("gateway %s did not take SET %d over: %w", to, set, err))
	}
	done := time.Now()
	res.Epoch, res.ClaimSeq = a.Result.Epoch, a.Result.ClaimSeq
	res.SwitchMs, res.PauseMs = ms(done.Sub(switched)), ms(done.Sub(cut))
	r.moves.Add(1)
	r.movePauseNs.Store(int64(done.Sub(cut)))
	r.s.log.Info("SET moved", "set", set, "to", to, "epoch", res.Epoch, "last_seq", last, "claim_seq", res.ClaimSeq,
		"prepare_ms", res.PrepareMs, "pause_ms", res.PauseMs, "cut_ms", res.CutMs, "switch_ms", res.SwitchMs)
	return res, nil
}

// connsGone bounds the wait for a SET's connections to go once they were
// told ERROR 9: each is shut for reading at once, so its reader sees the
// end and the egress releases it.
const connsGone = 5 * time.Second

// cut stops SET set here and makes its last round durable: the SET's last
// message on JetStream, final. Its connections get ERROR 9.
func (r *replicated) cut(set int) (uint64, error) {
	s := r.s
	st := s.setAt(set)
	rg := st.Transport()
	s.bus.SetLeaving(set)
	// Its users' OPENs and CHATs waiting on other gateways are answered
	// "unavailable" now, before ERROR 9 (an OPEN's share drawn there is its
	// opener's, told by the OPEN sent again).
	s.node.GiveUpSET(set)
	seq, err := rg.Claim(1)
	if err != nil {
		return 0, err
	}
	*rg.At(seq) = event.Event{Kind: event.KShutdown, Code: proto.ErrCodeMoved}
	rg.Publish(seq, seq)
	// Its connections gone (their last events need the ring), the money
	// answers it held for the journal written or given back, what it took
	// handled: nothing of it is left for anyone but the ring.
	eg := &st.Ledger().Egress
	for deadline := time.Now().Add(connsGone); eg.Conns.Load() > 0 || eg.Held.Load() > 0 || rg.Len() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.log.Warn("moving a SET: connections or held answers still there after ERROR 9; cut anyway", "set", set,
				"conns", eg.Conns.Load(), "held", eg.Held.Load(), "events", rg.Len())
			break
		}
	}
	r.step(placement.Cut{Set: set}) // the record changes next: no loss
	s.bus.Route(set, event.NewNowhere(rg.Size()), true)
	if err := rg.Close(); err != nil { // every event it took, applied and journaled
		return 0, err
	}
	last, err := s.journal.Drain(set)
	if err != nil {
		return 0, err
	}
	if err := s.journal.Release(set); err != nil {
		return 0, err
	}
	return last, nil
}

// blank makes set's state object blank for a load: renewed if it ran,
// loaded or followed here before (the placement says).
func (r *replicated) blank(set int) error {
	rd, _ := r.stepReady(placement.Blank{Set: set})
	for _, set := range rd.Renew {
		if err := r.s.renewSET(set); err != nil {
			return err
		}
	}
	return nil
}

// prepareIn follows SET set, run by gateway from, until it has caught up.
func (r *replicated) prepareIn(set, from int) error {
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
func (r *replicated) caughtUpIn(set int, f *jsjournal.Follower) error {
	r.mu.Lock()
	err := r.stepOnly(placement.CaughtUp{Set: set})
	if err == nil {
		r.incoming[set] = f
	}
	r.mu.Unlock()
	if err != nil {
		f.Stop()
	}
	return err
}

// stepOnly steps an event whose answer asks nothing of the driver
// (CaughtUp, SwitchIn), under the caller's mu.
func (r *replicated) stepOnly(ev placement.Event) error {
	_, err := r.stepReady(ev)
	return err
}

// follow loads set and follows its records into in, caught up with the
// subject's last message when it returns.
func (r *replicated) follow(set int) error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareWait)
	defer cancel()
	if f := r.takeStandby(set); f != nil {
		// Its standby follows it already: caught up, it is the move's.
		err := r.caughtUp(ctx, set, f)
		if err == nil {
			return r.caughtUpIn(set, f)
		}
		f.Stop()
		r.s.log.Info("following a SET: its standby did not catch up; loading it again", "set", set, "err", err)
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
		r.s.log.Info("following a SET: starting again", "set", set, "attempt", attempt, "err", err)
	}
}

// followAttempts bounds the starts of a follow during its prepare.
const followAttempts = 3

// followOnce loads set into its blank state object and follows it until it
// has applied every message appended before the call.
func (r *replicated) followOnce(ctx context.Context, set int) (*jsjournal.Follower, error) {
	load, apply := restorer(r.s.setAt(set))
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
func (r *replicated) caughtUp(ctx context.Context, set int, f *jsjournal.Follower) error {
	last, err := r.store.Last(ctx, set)
	if err != nil {
		return err
	}
	return f.WaitApplied(ctx, last.Seq)
}

// abortIn drops a move in of set, if any and not switching.
func (r *replicated) abortIn(set int, why string) {
	r.step(placement.AbortIn{Set: set, Why: why})
}

// switchIn takes set over from gateway from, whose last message of the SET
// is last: read up to it, the claim appended right after it, and the SET
// served.
func (r *replicated) switchIn(set, from int, last uint64) (MoveResult, error) {
	res := MoveResult{Set: set, To: r.name, LastSeq: last}
	r.mu.Lock()
	err := r.stepOnly(placement.SwitchIn{Set: set, From: from})
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
	st := r.state(set)
	r.s.log.Info("serving SET", "set", set, "epoch", c.Epoch, "was", was.Name, "moved", true, "claim_seq", seq,
		"records_followed", rep.Records, "followed_for", time.Since(st.Since).Round(time.Millisecond))
	return res, nil
}

// serve starts SET set, loaded here, after its claim at message seq: its
// journal group opened, its ring started, the bus routed to it.
func (r *replicated) serve(set int, seq uint64) error {
	st := r.s.setAt(set)
	if sum := ledger.Sum([]*ledger.Ledger{st.Ledger()}); sum.Check() != nil {
		return fmt.Errorf("SET %d as loaded does not balance: %w", set, sum.Check())
	}
	if err := r.s.journal.Reopen(set, seq); err != nil {
		return err
	}
	// Started before it is routed here: nothing reads a ring's state
	// (metrics, the ticker) before it runs.
	if err := st.Transport().Start(); err != nil {
		return err
	}
	r.step(placement.Served{Set: set})
	r.s.bus.Route(set, st.Transport(), false)
	return nil
}

// moveStatuses are the moves in flight on this gateway, both ways.
func (r *replicated) moveStatuses() []MoveStatus {
	r.pmu.Lock()
	sets := r.pm.Sets()
	r.pmu.Unlock()
	out := []MoveStatus{}
	for set, st := range sets {
		switch st.Role {
		case placement.MovingOut:
			out = append(out, MoveStatus{Set: set, From: r.name, To: st.PeerName, Phase: st.Phase.String(), SinceMs: ms(time.Since(st.Since))})
		case placement.MovingIn:
			out = append(out, MoveStatus{Set: set, From: r.owners.Get(set).Name, To: r.name, Phase: "following", SinceMs: ms(time.Since(st.Since))})
		}
	}
	return out
}

// SetStatus is a SET's state on this gateway (package placement), in GET
// /cluster.
type SetStatus struct {
	Set   int    `json:"set"`
	Role  string `json:"role"`            // away, standby, taking, serving, moving_out, moving_in
	Phase string `json:"phase,omitempty"` // within the role: starting, following, loading, preparing, cutting, switching
	// Owner and OwnerNode are the gateway of the SET's last claim heard
	// ("" and -1: none yet), Epoch the claim's.
	Owner     string `json:"owner"`
	OwnerNode int    `json:"owner_node"`
	Epoch     uint64 `json:"epoch"`
	// Tells: this gateway tells the SET's money now.
	Tells   bool    `json:"tells"`
	SinceMs float64 `json:"since_ms,omitempty"` // in its role, but away
}

// setStatuses are every SET's state on this gateway.
func (r *replicated) setStatuses() []SetStatus {
	r.pmu.Lock()
	sets := r.pm.Sets()
	lost := r.pm.Lost() != nil
	r.pmu.Unlock()
	out := make([]SetStatus, len(sets))
	for set, st := range sets {
		out[set] = SetStatus{Set: set, Role: st.Role.String(), Phase: st.Phase.String(), Owner: st.Owner.Name, OwnerNode: st.Owner.Node,
			Epoch: st.Owner.Epoch, Tells: st.Tells() && !lost}
		if st.Role != placement.Away && !st.Since.IsZero() {
			out[set].SinceMs = ms(time.Since(st.Since))
		}
	}
	return out
}

// isMoving reports whether set is being handed over from here.
func (r *replicated) isMoving(set int) bool {
	return r != nil && r.state(set).Role == placement.MovingOut
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// rebalance hands a SET the placement chose to a gateway that runs fewer
// than its share, on a goroutine of its own: a gateway that joins takes its
// share from the others this way.
func (r *replicated) rebalance(mv placement.Move) {
	name := r.s.node.NameOf(mv.To)
	if name == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
		defer cancel()
		if _, err := r.moveOut(ctx, mv.Set, name); err == nil {
			r.s.log.Info("rebalanced: a SET handed to a gateway that ran fewer than its share", "set", mv.Set, "to", name)
		}
	}()
}

// moveTimeout bounds a whole move, however it was asked for: the target's
// load and the switch, with room to spare.
const moveTimeout = prepareWait + switchWait + 30*time.Second

// handleMove answers POST /sets/{set}/move?to=NAME: the SET handed to the
// gateway named NAME, by its owner, whichever gateway is asked.
func (s *Server) handleMove(w http.ResponseWriter, r *http.Request) {
	set, err := strconv.Atoi(r.PathValue("set"))
	if err != nil || set < 0 || set >= s.opts.Sets {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("set: %q is not a SET: want 0..%d", r.PathValue("set"), s.opts.Sets-1)})
		return
	}
	to := r.URL.Query().Get("to")
	if to == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "to: the name of the gateway to hand the SET to is missing"})
		return
	}
	if s.repl == nil {
		writeJSON(w, http.StatusConflict, map[string]any{"error": errNotReplicated.Error(), "set": set, "to": to})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), moveTimeout)
	defer cancel()
	var res MoveResult
	status := http.StatusOK
	switch owner := s.repl.owners.Of(set); {
	case s.repl.state(set).Tells():
		res, err = s.repl.moveOut(ctx, set, to)
		status = moveStatus(err)
	case owner < 0:
		err, status = fmt.Errorf("SET %d has no owner now (between two): ask again shortly", set), http.StatusServiceUnavailable
	default:
		var a moveAnswer
		a, err = s.askMove(ctx, owner, moveOp{Op: "move", Set: set, To: to})
		res, status = a.Result, a.Status
		if err != nil && status == 0 {
			status = http.StatusServiceUnavailable // the owner did not answer
		}
	}
	if err != nil {
		writeJSON(w, status, map[string]any{"error": err.Error(), "set": set, "to": to})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleRebalance answers POST /cluster/rebalance: this gateway hands out,
// one at a time, every SET beyond its share to the gateways that run
// fewer than theirs, as -rebalance does by itself, and answers the moves.
func (s *Server) handleRebalance(w http.ResponseWriter, r *http.Request) {
	if s.repl == nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": errNotReplicated.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), moveTimeout)
	defer cancel()
	moves, err := s.repl.handOut(ctx, false)
	if moves == nil {
		moves = []MoveResult{}
	}
	out := map[string]any{"gateway": s.repl.name, "moves": moves}
	switch {
	case errors.Is(err, errMoveBusy) && len(moves) == 0:
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	case err != nil:
		out["error"] = err.Error()
		writeJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// handleDrain answers POST /cluster/drain: this gateway leaves the cluster
// — it hands every SET it runs to the others, then stops (exit 0), as at
// SIGTERM. It answers at once; GET /cluster shows it leaving.
func (s *Server) handleDrain(w http.ResponseWriter, r *http.Request) {
	if s.repl == nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": errNotReplicated.Error()})
		return
	}
	s.leaveOnce.Do(func() { close(s.leave) })
	writeJSON(w, http.StatusAccepted, map[string]any{"gateway": s.repl.name, "leaving": true, "sets": s.repl.running()})
}

// LeaveRequested is closed once POST /cluster/drain asked this gateway to
// leave: its runner shuts it down (Shutdown hands its SETs over first).
func (s *Server) LeaveRequested() <-chan struct{} { return s.leave }

// handOut moves this gateway's SETs out one at a time: every one when
// leaving, else those beyond its share (placement.NextMove). It returns the
// moves made, and the first error once a move failed twice in a row or
// ctx ended with SETs left to move.
func (r *replicated) handOut(ctx context.Context, leaving bool) ([]MoveResult, error) {
	var done []MoveResult
	owner := make([]int, r.s.opts.Sets)
	var lastErr error
	for fails := 0; fails < 2 || leaving; {
		if ctx.Err() != nil {
			return done, errors.Join(ctx.Err(), lastErr)
		}
		telling := r.telling()
		for set := range owner {
			owner[set] = r.owners.Of(set)
			if _, ok := telling[set]; ok {
				owner[set] = r.node
			}
		}
		set, to, ok := placement.NextMove(owner, r.s.node.Takers(), r.node)
		if !ok {
			if leaving && r.running() > 0 {
				return done, errNoTaker
			}
			return done, nil
		}
		res, err := r.moveOut(ctx, set, r.s.node.NameOf(to))
		if err != nil {
			fails, lastErr = fails+1, err
			sleepCtx(ctx, 100*time.Millisecond) // a SET whose cut failed is taken back first
			continue
		}
		fails = 0
		done = append(done, res)
	}
	return done, lastErr
}

// drain hands every SET this gateway runs to the others before it stops:
// a graceful stop costs its users a reconnect and nothing else. What it
// could not hand over within ctx is released at the stop, for the others to
// take from JetStream.
func (r *replicated) drain(ctx context.Context) {
	if r.lostReason() != "" || r.running() == 0 {
		return
	}
	if r.fenced.Load() {
		r.s.log.Warn("leaving while cut off from NATS: no SET can be handed over; the others claim them once this gateway's lease lapses", "sets", r.running())
		return
	}
	r.step(placement.Leave{})
	r.s.node.SetLeaving(true)
	start := time.Now()
	moves, err := r.handOut(ctx, true)
	switch {
	case errors.Is(err, errNoTaker):
		// The cluster's last gateway, or its others leaving too: nobody to
		// hand a SET to, which is no fault.
		r.s.log.Info("leaving: no other gateway takes SETs; they are released at the stop", "left", r.running())
	case err != nil:
		r.s.log.Warn("leaving: SETs not handed over before the stop; released to the others instead", "left", r.running(), "err", err)
	}
	r.s.log.Info("left the cluster's SETs", "moved", len(moves), "took", time.Since(start).Round(time.Millisecond))
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
