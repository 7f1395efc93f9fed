package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/campaign/parts"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/placement"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/replicated"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// The replicated SETs (-journal jetstream, package replicated) in the
// server: opened and started with it, handed the SETs, the bus, the
// journal and the cluster; their snapshots and the admin API's moves.

// errNotReplicated: the moves' admin calls on a server whose journal is
// not on JetStream.
var errNotReplicated = errors.New("SETs move only between gateways whose journal is on JetStream (-journal jetstream)")

// host is the server as the replicated SETs see it.
type host Server

func (h *host) SET(i int) *set.SET        { return (*Server)(h).setAt(i) }
func (h *host) Renew(i int) error         { return (*Server)(h).renewSET(i) }
func (h *host) Bus() *event.Bus           { return h.bus }
func (h *host) Journal() *journal.Journal { return h.journal }
func (h *host) Node() *cluster.Node       { return h.node }
func (h *host) AdminKey() []byte          { return h.campaignKey }

// Serving gives the campaign runner the shares of SET i, about to run
// here: it deals what is left of them.
func (h *host) Serving(i int) {
	if st := (*Server)(h).setAt(i); st != nil && h.camps != nil {
		h.camps.Adopt(i, st.Campaigns())
	}
}

// ExitLost is the exit status of a gateway that lost a SET: its supervisor
// starts it again, and it takes its share of the SETs that need an owner.
const ExitLost = 3

// joinReplicated opens the replicated SETs' records, joins the cluster and
// opens the journal on JetStream: openJournal and joinCluster of this mode.
func (s *Server) joinReplicated() error {
	pass, err := s.opts.natsPassword()
	if err != nil {
		return err
	}
	i, n, _ := s.opts.nodeOf()
	name := s.opts.Name
	if name == "" {
		name = fmt.Sprintf("gw%d", i)
	}
	if s.repl, err = replicated.Open(replicated.Config{Log: s.log, NATS: s.opts.NATS, Auth: s.opts.natsAuth(pass), Node: i, Nodes: n, Name: name,
		Sets: s.opts.Sets, Replicas: s.opts.Replicas, Lease: s.opts.Lease, AckWait: s.opts.JetStreamAckWait,
		Standby: !s.opts.NoStandby, Rebalance: s.opts.Rebalance}, (*host)(s)); err != nil {
		return err
	}
	if err := s.joinCluster(); err != nil {
		s.repl.Close()
		s.repl = nil
		return err
	}
	j, err := journal.Open(s.journalHooks(s.repl.JournalOptions(journal.Options{Sets: s.opts.Sets, RoundEvery: s.opts.JournalRound})))
	if err != nil {
		s.closeCluster()
		s.repl.Close()
		s.repl = nil
		return err
	}
	s.journal = j
	return nil
}

// Lost is closed once the gateway lost a SET it ran (-journal jetstream):
// it must stop (Shutdown), and exit with ExitLost.
func (s *Server) Lost() <-chan struct{} {
	if s.repl == nil {
		return nil
	}
	return s.repl.Lost()
}

// LostError is Shutdown's error once the gateway lost a SET it ran: it
// exits with ExitLost.
type LostError struct{ Why string }

func (e *LostError) Error() string {
	return "this gateway lost a SET it ran to another gateway: " + e.Why
}

// startReplicated starts the journal's writer and the claims: the
// replicated mode's recover, before anything is served. No SET runs yet.
func (s *Server) startReplicated() error {
	nc, stream, prefix := s.repl.Campaigns()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := parts.OpenRegistry(ctx, parts.RegistryConfig{Conn: nc, Stream: stream, Prefix: prefix, Node: s.repl.Node(),
		Runner: s.camps, Limits: s.campLimits, Key: s.campaignKey, Log: s.log, Refused: s.node.Refused})
	if err != nil {
		return err
	}
	s.parts.Registry = reg
	for _, st := range s.allSets() {
		st.Snapshots(func(p stages.Part) { s.snapParts <- p })
	}
	if err := s.journal.Start(); err != nil {
		return err
	}
	s.repl.RouteAll()
	return nil
}

// snapshotSETs puts a snapshot of every SET run here to JetStream, purging
// what it makes useless (replicated.SETs.Snapshot).
func (s *Server) snapshotSETs() error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	for len(s.snapParts) > 0 {
		<-s.snapParts
	}
	start := time.Now()
	id := uint64(start.UnixNano()) // never reused: a new process's too
	sets, bytes, err := s.repl.Snapshot(id, s.snapParts, s.setOf)
	if err != nil {
		return err
	}
	took := time.Since(start)
	s.snapStats.count.Add(1)
	s.snapStats.bytes.Store(uint64(bytes))
	s.snapStats.ns.Store(int64(took))
	s.log.Info("snapshot", "id", id, "sets", sets, "bytes", bytes, "took", took.Round(time.Microsecond))
	return nil
}

// setOf is the SET of journal producer pid.
func (s *Server) setOf(pid uint16) int {
	for _, st := range s.allSets() {
		if p := st.PIDs(); p[0] == int(pid) || p[1] == int(pid) {
			return st.Index()
		}
	}
	return -1
}

// shutdownCode is the ERROR code the SETs' clients get at a stop: moved
// once this gateway lost a SET, shutting down otherwise.
func (s *Server) shutdownCode() uint8 {
	if s.repl.LostReason() != "" {
		return proto.ErrCodeMoved
	}
	return 0
}

// handleMove answers POST /sets/{set}/move?to=NAME: the SET handed to the
// gateway named NAME, by its owner, whichever gateway is asked.
func (s *Server) handleMove(w http.ResponseWriter, r *http.Request) {
	set, err := strconv.Atoi(r.PathValue("set"))
	if err != nil || set < 0 || set >= s.opts.Sets {
		admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("set: %q is not a SET: want 0..%d", r.PathValue("set"), s.opts.Sets-1)})
		return
	}
	to := r.URL.Query().Get("to")
	if to == "" {
		admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "to: the name of the gateway to hand the SET to is missing"})
		return
	}
	if s.repl == nil {
		admin.WriteJSON(w, http.StatusConflict, map[string]any{"error": errNotReplicated.Error(), "set": set, "to": to})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), replicated.MoveTimeout)
	defer cancel()
	var res replicated.MoveResult
	status := http.StatusOK
	switch owner := s.repl.OwnerOf(set); {
	case s.repl.Tells(set):
		res, err = s.repl.Move(ctx, set, to)
		status = replicated.Status(err)
	case owner < 0:
		err, status = fmt.Errorf("SET %d has no owner now (between two): ask again shortly", set), http.StatusServiceUnavailable
	default:
		res, status, err = s.repl.AskMove(ctx, owner, set, to)
	}
	if err != nil {
		admin.WriteJSON(w, status, map[string]any{"error": err.Error(), "set": set, "to": to})
		return
	}
	admin.WriteJSON(w, http.StatusOK, res)
}

// handleRebalance answers POST /cluster/rebalance: this gateway hands out,
// one at a time, every SET beyond its share to the gateways that run
// fewer than theirs, as -rebalance does by itself, and answers the moves.
func (s *Server) handleRebalance(w http.ResponseWriter, r *http.Request) {
	if s.repl == nil {
		admin.WriteJSON(w, http.StatusConflict, map[string]string{"error": errNotReplicated.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), replicated.MoveTimeout)
	defer cancel()
	moves, err := s.repl.HandOut(ctx)
	if moves == nil {
		moves = []replicated.MoveResult{}
	}
	out := map[string]any{"gateway": s.repl.Name(), "moves": moves}
	switch {
	case errors.Is(err, placement.ErrMoveBusy) && len(moves) == 0:
		admin.WriteJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	case err != nil:
		out["error"] = err.Error()
		admin.WriteJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	admin.WriteJSON(w, http.StatusOK, out)
}

// handleDrain answers POST /cluster/drain: this gateway leaves the cluster
// — it hands every SET it runs to the others, then stops (exit 0), as at
// SIGTERM. It answers at once; GET /cluster shows it leaving.
func (s *Server) handleDrain(w http.ResponseWriter, r *http.Request) {
	if s.repl == nil {
		admin.WriteJSON(w, http.StatusConflict, map[string]string{"error": errNotReplicated.Error()})
		return
	}
	s.leaveOnce.Do(func() { close(s.leave) })
	admin.WriteJSON(w, http.StatusAccepted, map[string]any{"gateway": s.repl.Name(), "leaving": true, "sets": s.repl.Running()})
}

// LeaveRequested is closed once POST /cluster/drain asked this gateway to
// leave: its runner shuts it down (Shutdown hands its SETs over first).
func (s *Server) LeaveRequested() <-chan struct{} { return s.leave }
