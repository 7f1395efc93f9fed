package replicated

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/placement"
	"github.com/hongbao-io/hongbao/proto"
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
	errMoveBusy = placement.ErrMoveBusy
	errNoTaker  = errors.New("no other gateway takes SETs now")
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

// askMove sends op to gateway node and decodes its answer.
func (r *SETs) askMove(ctx context.Context, node int, op moveOp) (moveAnswer, error) {
	op.From = r.cfg.Node
	b, _ := json.Marshal(op)
	signed, _ := json.Marshal(cluster.SignedOp{Op: b, Proof: cluster.Proof(r.host.AdminKey(), b)})
	reply, err := r.host.Node().RequestOne(ctx, node, "move", signed)
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

// AskMove asks gateway owner, which runs set, to hand it to the gateway
// named to: the move's result and its HTTP status.
func (r *SETs) AskMove(ctx context.Context, owner, set int, to string) (MoveResult, int, error) {
	a, err := r.askMove(ctx, owner, moveOp{Op: "move", Set: set, To: to})
	status := a.Status
	if err != nil && status == 0 {
		status = http.StatusServiceUnavailable // the owner did not answer
	}
	return a.Result, status, err
}

// ServeMove serves another gateway's move op: the server serves it on the
// cluster's "move" subject.
func (r *SETs) ServeMove(from int, data []byte) []byte {
	var signed cluster.SignedOp
	var op moveOp
	nd := r.host.Node()
	if json.Unmarshal(data, &signed) != nil || json.Unmarshal(signed.Op, &op) != nil {
		nd.Refused(from, "a move op that does not decode")
		return nil
	}
	if key := r.host.AdminKey(); len(key) > 0 && !hmac.Equal([]byte(signed.Proof), []byte(cluster.Proof(key, signed.Op))) {
		nd.Refused(from, "a move op without the proof of this gateway's -admin-token (every gateway needs the same one)")
		return nil
	}
	if op.From != from || op.Set < 0 || op.Set >= r.cfg.Sets {
		nd.Refused(from, "a move op naming another gateway, or no SET")
		return nil
	}
	var a moveAnswer
	var err error
	switch op.Op {
	case "move":
		ctx, cancel := context.WithTimeout(context.Background(), MoveTimeout)
		a.Result, err = r.Move(ctx, op.Set, op.To)
		cancel()
		a.Status = Status(err)
	case "prepare":
		err = r.prepareIn(op.Set, from)
	case "switch":
		a.Result, err = r.switchIn(op.Set, from, op.Last)
	case "abort":
		r.abortIn(op.Set, "its source gave the move up")
	default:
		nd.Refused(from, "a move op of no known kind")
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

// Status is the HTTP status of a move's error.
func Status(err error) int {
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
func (r *SETs) Move(ctx context.Context, set int, to string) (MoveResult, error) {
	res := MoveResult{Set: set, From: r.cfg.Name, To: to}
	node, ok := r.host.Node().NodeNamed(to)
	if !ok {
		node = -1
	}
	start := time.Now()
	err := r.step(placement.MoveOut{Set: set, To: node, ToName: to, Taker: slices.Contains(r.host.Node().Takers(), node), Now: start})
	switch {
	case err == nil:
	case errors.Is(err, placement.ErrMoveBusy):
		return res, errMoveBusy
	case errors.Is(err, placement.ErrNotHere):
		return res, badMove(409, "SET %d does not run on this gateway (%s)", set, r.cfg.Name)
	case errors.Is(err, placement.ErrNoGateway):
		return res, badMove(404, "no gateway named %q is up", to)
	case errors.Is(err, placement.ErrThere):
		return res, badMove(409, "SET %d already runs on %s", set, to)
	default:
		return res, badMove(409, "gateway %s takes no SETs now (leaving, or not ready)", to)
	}
	id := r.state(set).Move
	defer r.step(placement.MoveEnded{Set: set, Move: id})
	phase := func(p placement.Phase) { r.step(placement.MovePhase{Set: set, Move: id, Phase: p}) }
	fail := func(err error) (MoveResult, error) {
		r.moveFailures.Add(1)
		r.cfg.Log.Warn("moving a SET failed", "set", set, "to", to, "err", err)
		return res, err
	}

	pctx, cancel := context.WithTimeout(ctx, prepareWait)
	_, err = r.askMove(pctx, node, moveOp{Op: "prepare", Set: set})
	cancel()
	if err != nil {
		r.askMove(context.Background(), node, moveOp{Op: "abort", Set: set}) //nolint: best effort; its follow times out otherwise
		return fail(fmt.Errorf("gateway %s could not follow SET %d: %w", to, set, err))
	}
	cut := time.Now()
	res.PrepareMs = ms(cut.Sub(start))
	phase(placement.Cutting)
	last, err := r.cut(set, id)
	res.LastSeq = last
	if err != nil {
		// Its state may hold what never became durable: it is taken again
		// from JetStream (the record still names this gateway).
		r.askMove(context.Background(), node, moveOp{Op: "abort", Set: set})
		return fail(fmt.Errorf("cutting SET %d: %w", set, err))
	}
	switched := time.Now()
	res.CutMs = ms(switched.Sub(cut))
	phase(placement.Switching)
	sctx, cancel := context.WithTimeout(ctx, switchWait)
	a, err := r.askMove(sctx, node, moveOp{Op: "switch", Set: set, Last: last})
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
	r.cfg.Log.Info("SET moved", "set", set, "to", to, "epoch", res.Epoch, "last_seq", last, "claim_seq", res.ClaimSeq,
		"prepare_ms", res.PrepareMs, "pause_ms", res.PauseMs, "cut_ms", res.CutMs, "switch_ms", res.SwitchMs)
	return res, nil
}

// connsGone bounds the wait for a SET's connections to go once they were
// told ERROR 9: each is shut for reading at once, so its reader sees the
// end and the egress releases it.
const connsGone = 5 * time.Second

// cut stops SET set here and makes its last round durable: the SET's last
// message on JetStream, final. Its connections get ERROR 9.
func (r *SETs) cut(set int, move uint64) (uint64, error) {
	st := r.host.SET(set)
	rg := st.Transport()
	r.host.Bus().SetLeaving(set)
	// Its users' OPENs and CHATs waiting on other gateways are answered
	// "unavailable" now, before ERROR 9 (an OPEN's share drawn there is its
	// opener's, told by the OPEN sent again).
	r.host.Node().GiveUpSET(set)
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
			r.cfg.Log.Warn("moving a SET: connections or held answers still there after ERROR 9; cut anyway", "set", set,
				"conns", eg.Conns.Load(), "held", eg.Held.Load(), "events", rg.Len())
			break
		}
	}
	r.step(placement.Cut{Set: set, Move: move}) // the record changes next: no loss
	r.host.Bus().Route(set, event.NewNowhere(rg.Size()), true)
	if err := rg.Close(); err != nil { // every event it took, applied and journaled
		return 0, err
	}
	last, err := r.host.Journal().Drain(set)
	if err != nil {
		return 0, err
	}
	if err := r.host.Journal().Release(set); err != nil {
		return 0, err
	}
	return last, nil
}

// rebalance hands a SET the placement chose to a gateway that runs fewer
// than its share, on a goroutine of its own: a gateway that joins takes its
// share from the others this way.
func (r *SETs) rebalance(mv placement.Move) {
	name := r.host.Node().NameOf(mv.To)
	if name == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), MoveTimeout)
		defer cancel()
		if _, err := r.Move(ctx, mv.Set, name); err == nil {
			r.cfg.Log.Info("rebalanced: a SET handed to a gateway that ran fewer than its share", "set", mv.Set, "to", name)
		}
	}()
}

// moveTimeout bounds a whole move, however it was asked for: the target's
// load and the switch, with room to spare.
const MoveTimeout = prepareWait + switchWait + 30*time.Second

// handOut moves this gateway's SETs out one at a time: every one when
// leaving, else those beyond its share (placement.NextMove). It returns the
// moves made, and the first error once a move failed twice in a row or
// ctx ended with SETs left to move.
func (r *SETs) handOut(ctx context.Context, leaving bool) ([]MoveResult, error) {
	var done []MoveResult
	owner := make([]int, r.cfg.Sets)
	var lastErr error
	for fails := 0; fails < 2 || leaving; {
		if ctx.Err() != nil {
			return done, errors.Join(ctx.Err(), lastErr)
		}
		telling := r.Telling()
		for set := range owner {
			owner[set] = r.owners.Of(set)
			if _, ok := telling[set]; ok {
				owner[set] = r.cfg.Node
			}
		}
		set, to, ok := placement.NextMove(owner, r.host.Node().Takers(), r.cfg.Node)
		if !ok {
			if leaving && r.Running() > 0 {
				return done, errNoTaker
			}
			return done, nil
		}
		res, err := r.Move(ctx, set, r.host.Node().NameOf(to))
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

// Drain hands every SET this gateway runs to the others before it stops:
// a graceful stop costs its users a reconnect and nothing else. What it
// could not hand over within ctx is released at the stop, for the others to
// take from JetStream.
func (r *SETs) Drain(ctx context.Context) {
	if r.LostReason() != "" || r.Running() == 0 {
		return
	}
	if r.fenced.Load() {
		r.cfg.Log.Warn("leaving while cut off from NATS: no SET can be handed over; the others claim them once this gateway's lease lapses", "sets", r.Running())
		return
	}
	r.step(placement.Leave{})
	r.host.Node().SetLeaving(true)
	start := time.Now()
	moves, err := r.handOut(ctx, true)
	switch {
	case errors.Is(err, errNoTaker):
		// The cluster's last gateway, or its others leaving too: nobody to
		// hand a SET to, which is no fault.
		r.cfg.Log.Info("leaving: no other gateway takes SETs; they are released at the stop", "left", r.Running())
	case err != nil:
		r.cfg.Log.Warn("leaving: SETs not handed over before the stop; released to the others instead", "left", r.Running(), "err", err)
	}
	r.cfg.Log.Info("left the cluster's SETs", "moved", len(moves), "took", time.Since(start).Round(time.Millisecond))
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
