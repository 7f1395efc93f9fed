// Package server wires hongbao together: the ingress event loops, the SETs
// (built by package set from the flags: one ring per SET with its stages,
// session → shake → split → egress; -pipeline swaps the ring for a transport
// of package transport, for comparison), the campaign producers and the
// admin HTTP API; and it runs the graceful shutdown. It starts and stops the
// SETs but handles no event itself: requests and money are the stages'.
//
// It owns the -data directory (locked: one server per directory): it opens
// the journal (package journal) before building the SETs, replays it into
// them and the campaign runner before serving (durable.go), and closes it
// after the rings have drained at shutdown. /healthz answers 503 once the
// journal cannot make money durable.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/campaign/parts"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/egress"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/flightrec"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/replicated"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// Stats is the ledger of GET /stats (package ledger has its invariants).
type Stats = ledger.Stats

// Server is a running hongbao server.
type Server struct {
	opts       Options
	log        *slog.Logger
	bus        *event.Bus // nil with -pipeline=none
	ing        *ingress.Ingress
	camps      *campaign.Runner
	campLimits campaign.Limits // what a campaign may ask: the whole of one, in a cluster, before its parts
	admin      *admin.Server   // the admin API; nil when off
	stopTick   chan struct{}
	tickDone   chan struct{}
	ticking    bool // Start started tick: Shutdown waits for tickDone only then

	maxConns int         // client connections admitted: -max-conns within the open-files limit
	stopping atomic.Bool // Shutdown has begun: /healthz answers 503

	shutdownOnce sync.Once
	shutdownErr  error
	leave        chan struct{} // closed by POST /cluster/drain
	leaveOnce    sync.Once

	node  *cluster.Node    // in a cluster (-nats): this gateway's membership; else nil
	parts *parts.Dealer    // in a cluster: campaigns dealt by parts over the gateways
	repl  *replicated.SETs // -journal jetstream: the replicated SETs; else nil
	// campaignKey: the admin token, which signs the campaign messages this
	// gateway sends and checks those it takes (cluster.SignedOp); nil without one.
	campaignKey []byte
	journal     *journal.Journal // nil with -journal off or -pipeline=none
	dataDir     *dataDir
	// byIndex are the SETs built here by SET number (nil for one another
	// gateway runs for good). A SET that moves away is renewed in place:
	// under setsMu once the server runs.
	setsMu  sync.RWMutex
	byIndex []*set.SET
	// recoveryTime is how long the replay took at start.
	recoveryTime time.Duration
	snapMu       sync.Mutex       // one snapshot at a time
	snapID       uint64           // the last snapshot's id
	snapParts    chan stages.Part // the SETs' stages hand in their state
	snapStats    snapshotStats
	stopSnap     chan struct{}
	snapDone     chan struct{}
	slowTrace    *flightrec.Recorder // -trace-slow; nil when off
}

// New builds a server from filled, validated options and binds its listeners.
func New(o Options, log *slog.Logger) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	secret, err := o.secret()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, log: log, stopTick: make(chan struct{}), tickDone: make(chan struct{}), leave: make(chan struct{}),
		snapParts: make(chan stages.Part, 2*o.Sets), stopSnap: make(chan struct{}), snapDone: make(chan struct{})}
	maxConns, clamped, err := connLimit(o.MaxConns)
	s.maxConns = maxConns
	if err != nil {
		return nil, err
	}
	if clamped {
		log.Warn("-max-conns above the open-files limit less the descriptors kept for the admin API: lowered", "max_conns", o.MaxConns, "now", maxConns, "reserve", FDReserve)
	}
	if o.ReusePort && o.NATS == "" {
		log.Warn("-reuseport without -nats: every process sharing the port is a server of its own, with its own users, pools and ledger; " +
			"a user can be logged in on two of them at once and each /stats counts its own. Share a port for a restart hand-over only, or make them gateways of one cluster (-nats)")
	}
	if o.Pipeline != "none" {
		if o.Journal == "jetstream" {
			// The SETs' claims first: joining, the node routes by them.
			if err := s.joinReplicated(); err != nil {
				return nil, err
			}
		} else {
			if err := s.openJournal(); err != nil {
				return nil, err
			}
			if o.NATS != "" {
				if err := s.joinCluster(); err != nil {
					s.closeJournal()
					return nil, err
				}
			}
		}
		if err := s.buildSETs(); err != nil {
			s.closeSlowTrace()
			s.closeCluster()
			s.closeJournal()
			return nil, err
		}
	}
	s.ing, err = ingress.New(ingress.Options{
		Listen:       strings.Split(o.Listen, ","),
		Mode:         o.Ingress,
		Loops:        o.Loops,
		ReusePort:    o.ReusePort,
		MaxConns:     maxConns,
		LoginTimeout: o.LoginTimeout,
		AuthSecret:   secret,
		Bus:          s.bus,
		Bare:         o.Pipeline == "none",
		ShedDelay:    max(o.ShedDelay, 0),
		ChatRate:     o.ChatRate,
		ChatBurst:    o.ChatBurst,
		// Disruptor's listeners poll: a yield queues the loop behind them.
		// With a P more than the loops (a gateway's), what a round woke
		// runs on the free P, and a yield only moves the loop to another
		// thread (docs/DESIGN.md, Epoll loops yield after a round).
		NoYield:     o.Pipeline == "disruptor" || runtime.GOMAXPROCS(0) > o.Loops,
		Handoff:     o.Handoff,
		NetpollWait: o.LoopWait == "netpoller",
		Redirect:    s.redirect,
		Logger:      log,
	})
	if err != nil {
		s.closeRings()
		return nil, err
	}
	if s.bus != nil {
		s.campLimits = campaign.Limits{MaxRate: 1_000_000, MaxTotal: 1 << 32,
			MaxShares: uint16(o.MaxShares), MaxAmount: uint32(o.MaxTotal)}
		cc := campaign.Config{
			Limits:     s.campLimits,
			MaxRunning: o.MaxCampaigns,
			MaxPool:    uint64(o.MaxPool), Taken: s.shakeTaken,
			MaxLive: uint64(o.MaxEnvelopes), Live: s.envelopesLive,
		}
		if s.node != nil {
			cc.Node, cc.Nodes = s.node.Options().Node, s.node.Options().Nodes
		}
		s.camps, err = campaign.NewRunner(s.bus, cc)
		if err == nil && s.node != nil {
			s.parts = &parts.Dealer{Node: s.node, Runner: s.camps, Limits: s.campLimits, Key: s.campaignKey, Log: s.log}
		}
		if err == nil && s.repl != nil {
			err = s.startReplicated()
		} else if err == nil {
			err = s.recover()
		}
		if err != nil {
			s.ing.Close()
			s.closeRings()
			s.closeJournal()
			return nil, err
		}
	}
	if o.Admin != "off" {
		if err := s.listenAdmin(); err != nil {
			s.ing.Close()
			s.closeRings()
			s.closeJournal()
			return nil, err
		}
	}
	return s, nil
}

// buildSETs makes one ring (or, for comparison, another transport: see
// -pipeline) per SET with its chain of stages.
func (s *Server) buildSETs() error {
	so := s.opts.setOptions()
	so.Journal = s.journal
	if s.opts.TraceSlow > 0 {
		t, err := flightrec.New(s.traceDir(), s.log)
		if err != nil {
			return err
		}
		s.slowTrace, so.SlowAnswer, so.SlowOver = t, t.Slow, s.opts.TraceSlow
	}
	if s.node != nil && s.repl == nil { // replicated, every SET is built here: any may come to run here
		so.Remote = s.node.Remote
	}
	bus, sets, err := set.Build(s.opts.Sets, so)
	if err != nil {
		return err
	}
	s.bus = bus
	s.byIndex = make([]*set.SET, s.opts.Sets)
	for _, st := range sets {
		s.byIndex[st.Index()] = st
	}
	return nil
}

// traceDir is where -trace-slow writes: -trace-dir, or traces under -data.
func (s *Server) traceDir() string {
	if s.opts.TraceDir != "" {
		return s.opts.TraceDir
	}
	return filepath.Join(s.opts.Data, "traces")
}

// setAt is SET i as built here (nil if it is another gateway's for good).
func (s *Server) setAt(i int) *set.SET {
	s.setsMu.RLock()
	defer s.setsMu.RUnlock()
	return s.byIndex[i]
}

// renewSET replaces SET i, which does not run here, with a blank one that
// journals to the same producers: a SET that left, or whose load was
// abandoned, loads afresh.
func (s *Server) renewSET(i int) error {
	old := s.setAt(i)
	n, err := old.Renew(s.bus)
	if err != nil {
		return err
	}
	if s.repl != nil {
		n.Snapshots(func(p stages.Part) { s.snapParts <- p })
	}
	s.setsMu.Lock()
	defer s.setsMu.Unlock()
	s.byIndex[i] = n
	return nil
}

// ledgers are the ledgers of the SETs run here now: a SET another gateway
// runs, or that is moving, counts there.
func (s *Server) ledgers() []*ledger.Ledger {
	if s.bus == nil {
		return nil
	}
	local := s.bus.Local()
	out := make([]*ledger.Ledger, 0, len(local))
	s.setsMu.RLock()
	defer s.setsMu.RUnlock()
	for _, i := range local {
		if st := s.byIndex[i]; st != nil {
			out = append(out, st.Ledger())
		}
	}
	return out
}

// allSets are the SETs built here, in SET order.
func (s *Server) allSets() []*set.SET {
	s.setsMu.RLock()
	defer s.setsMu.RUnlock()
	var out []*set.SET
	for _, st := range s.byIndex {
		if st != nil {
			out = append(out, st)
		}
	}
	return out
}

// setOptions are the options of every SET.
func (o Options) setOptions() set.Options {
	wait, _ := ring.ParseWait(o.Wait)
	mode := egress.Batch
	if o.Egress == "frame" {
		mode = egress.EachFrame
	}
	return set.Options{
		Ring:       o.Ring,
		Pipeline:   o.Pipeline,
		Wait:       wait,
		Spins:      o.Spins,
		Yields:     o.Yields,
		Fused:      o.Stages == "fused",
		Egress:     mode,
		Limits:     o.Limits(),
		MaxPending: o.MaxPending,
		Seed:       uint64(time.Now().UnixNano()),
	}
}

func (s *Server) closeRings() {
	if s.bus != nil {
		s.bus.Close()
	}
	s.closeCluster()
	s.closeSlowTrace()
}

func (s *Server) closeSlowTrace() {
	if s.slowTrace != nil {
		s.slowTrace.Close()
	}
}

// Start starts the stages, the event loops, the ticker and the admin API.
func (s *Server) Start() error {
	if s.bus != nil {
		for _, i := range s.bus.Local() {
			if err := s.bus.Ring(i).Start(); err != nil {
				return err
			}
		}
		if s.node != nil {
			if err := s.startCluster(); err != nil {
				return err
			}
		}
		if s.repl != nil {
			s.repl.Run()
		}
		s.ticking = true
		go s.tick()
		if s.journal != nil && s.opts.SnapshotEvery > 0 {
			go s.snapshotLoop(s.opts.SnapshotEvery, s.stopSnap, s.snapDone)
		} else {
			close(s.snapDone)
		}
	} else {
		close(s.tickDone)
	}
	if err := s.ing.Start(); err != nil {
		return err
	}
	if s.admin != nil {
		go s.admin.Serve()
	}
	if goroutines := s.stageGoroutines(); s.opts.Wait == "spin" && goroutines > runtime.GOMAXPROCS(0) {
		s.log.Warn("-wait spin with more spinning stage goroutines than cores: they starve the event loops and one another; use park",
			"stage_goroutines", goroutines, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	s.log.Info("serving", "listen", s.Addrs(), "admin", s.AdminAddr(), "sets", s.opts.Sets, "ring", s.opts.Ring,
		"ingress", s.opts.Ingress, "max_conns", s.maxConns, "loops", s.opts.Loops, "pipeline", s.opts.Pipeline, "egress", s.opts.Egress, "wait", s.opts.Wait, "spins", s.opts.Spins, "yields", s.opts.Yields, "stages", s.opts.Stages)
	return nil
}

// stageGoroutines is how many goroutines run the SETs' stages.
func (s *Server) stageGoroutines() int {
	if s.bus == nil {
		return 0
	}
	return s.opts.localSets() * s.opts.setOptions().Goroutines()
}

// tick lets stages retry what full rings refused (event.Outbox), and watches
// for a failed ring: a stage that panicked stops the server loudly.
func (s *Server) tick() {
	defer close(s.tickDone)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stopTick:
			return
		case <-t.C:
			s.bus.Tick()
			for _, i := range s.bus.Local() {
				if err := s.bus.Ring(i).Err(); err != nil {
					s.log.Error("SET stopped: a stage failed", "set", i, "err", err)
					panic(err) // a half-dead server would hand out money inconsistently
				}
			}
		}
	}
}

// Addrs are the client listeners' addresses.
func (s *Server) Addrs() []net.Addr { return s.ing.Addrs() }

// AdminAddr is the admin API's address, or "" when it is off.
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr().String()
}

// Shutdown stops accepting, stops the campaigns, sends ERROR 8 to every
// client, waits (bounded by ctx) for the clients to go, drains the rings and
// stops. Answers already made are written before their connections close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	if s.repl != nil && s.ticking {
		// Its SETs handed to the others first, in most of the time given:
		// the rest of the stop is quick.
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); ok {
			dctx, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/4))
		}
		s.repl.Drain(dctx)
		cancel()
	}
	s.stopping.Store(true)
	s.log.Info("shutting down", "conns", s.ing.Conns())
	if s.repl != nil {
		s.repl.StopClaims()
	}
	s.ing.StopAccepting()
	if s.camps != nil {
		s.camps.Close()
	}
	// ERROR 8 to connections that never logged in, before KShutdown: once
	// CloseIdle returns, no LOGIN can be published any more, so every KLogin
	// is ahead of KShutdown in its ring and its egress tells that connection
	// too. (The other order let a LOGIN that raced the shutdown register a
	// connection after its egress had handled KShutdown: no ERROR 8, and
	// Shutdown waited out ctx for it.)
	s.ing.CloseIdle(8)
	if s.bus != nil {
		for _, i := range s.bus.Local() {
			r := s.bus.Ring(i)
			if seq, err := r.Claim(1); err == nil {
				*r.At(seq) = event.Event{Kind: event.KShutdown, Code: s.shutdownCode()}
				r.Publish(seq, seq)
			}
		}
	}
	for s.ing.Conns() > 0 {
		select {
		case <-ctx.Done():
			s.log.Warn("shutdown timeout: closing remaining connections", "conns", s.ing.Conns())
			goto stop
		case <-time.After(10 * time.Millisecond):
		}
	}
stop:
	// The ingress closes first: its last KDisconnects still need open rings,
	// and the rings then drain them (egress releases every connection).
	var errs []error
	errs = append(errs, s.ing.Close())
	if s.node != nil {
		deadline := time.Now().Add(2 * s.opts.ClusterTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		s.node.Leave(deadline)
	}
	close(s.stopTick)
	if s.ticking { // a server that was never started has no ticker to wait for
		<-s.tickDone
	}
	if s.bus != nil {
		// What SETs still send one another (an OPEN share an egress gives
		// back to its envelope) lands before any ring closes.
		deadline := time.Now().Add(2 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		if !s.bus.Settle(deadline) {
			s.log.Warn("shutdown: the rings did not settle; closing them anyway")
		}
		if s.ticking {
			close(s.stopSnap)
			<-s.snapDone
			// The last state, so that the next start replays nothing;
			// nothing of the kind while cut off from NATS.
			if s.repl.Fenced() {
				s.log.Warn("shutdown: cut off from NATS: no snapshot; the others load the SETs from JetStream")
			} else if err := s.snapshot(); err != nil {
				s.log.Error("snapshot at shutdown failed: the next start replays the journal", "err", err)
			}
		}
		errs = append(errs, s.bus.Close())
	}
	errs = append(errs, s.closeCluster())
	if why := s.repl.LostReason(); why != "" {
		errs = append(errs, &LostError{Why: why})
	}
	if err := s.journal.Err(); err != nil {
		// Logged when it happened; the exit status says so too, for whoever
		// runs the server under a supervisor.
		errs = append(errs, fmt.Errorf("the journal failed during the run, and no money was handed out after: %w", err))
	}
	errs = append(errs, s.closeJournal())
	s.closeSlowTrace()
	if s.admin != nil {
		s.admin.Stop(ctx)
	}
	return errors.Join(errs...)
}
