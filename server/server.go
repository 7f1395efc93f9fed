// Package server wires hongbao together: the ingress event loops, one ring
// per SET with its stages (session → shake → split → egress; -pipeline swaps
// the ring for a transport of package transport, for comparison), the
// campaign producers and the admin HTTP API; and it runs the graceful
// shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"hongbao/campaign"
	"hongbao/egress"
	"hongbao/event"
	"hongbao/ingress"
	"hongbao/ring"
	"hongbao/stages"
	"hongbao/transport"
)

// Server is a running hongbao server.
type Server struct {
	opts     Options
	log      *slog.Logger
	bus      *event.Bus // nil with -pipeline=none
	ledgers  []*stages.Ledger
	ing      *ingress.Ingress
	camps    *campaign.Runner
	admin    *http.Server
	adminLn  net.Listener
	metrics  *metrics.Set
	stopTick chan struct{}
	tickDone chan struct{}
	ticking  bool // Start started tick: Shutdown waits for tickDone only then

	shutdownOnce sync.Once
	shutdownErr  error
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
	s := &Server{opts: o, log: log, stopTick: make(chan struct{}), tickDone: make(chan struct{})}
	if o.Pipeline != "none" {
		if err := s.buildSETs(); err != nil {
			return nil, err
		}
	}
	s.ing, err = ingress.New(ingress.Options{
		Listen:       strings.Split(o.Listen, ","),
		Mode:         o.Ingress,
		Loops:        o.Loops,
		ReusePort:    o.ReusePort,
		MaxConns:     o.MaxConns,
		LoginTimeout: o.LoginTimeout,
		AuthSecret:   secret,
		Bus:          s.bus,
		Bare:         o.Pipeline == "none",
		ShedDelay:    max(o.ShedDelay, 0),
		NoYield:      o.Pipeline == "disruptor", // its listeners poll: a yield queues the loop behind them
		Logger:       log,
	})
	if err != nil {
		s.closeRings()
		return nil, err
	}
	if s.bus != nil {
		s.camps, err = campaign.NewRunner(s.bus, campaign.Limits{MaxRate: 1_000_000, MaxTotal: 1 << 32,
			MaxShares: uint16(o.MaxShares), MaxAmount: uint32(o.MaxTotal)})
		if err != nil {
			s.ing.Close()
			s.closeRings()
			return nil, err
		}
	}
	if o.Admin != "off" {
		if err := s.listenAdmin(); err != nil {
			s.ing.Close()
			s.closeRings()
			return nil, err
		}
	}
	return s, nil
}

// buildSETs makes one ring (or, for comparison, another transport: see
// -pipeline) per SET with its chain of stages.
func (s *Server) buildSETs() error {
	o := s.opts
	ts := make([]event.Transport, o.Sets)
	adds := make([]addStage, o.Sets)
	for i := range ts {
		t, add, err := newTransport(o)
		if err != nil {
			return err
		}
		ts[i], adds[i] = t, add
	}
	// Requests may fill a ring only to 7/8: the rest stays for answers and
	// overload replies, which must never be refused for room.
	s.bus = event.NewBus(ts, o.Ring/8)
	now := func() int64 { return time.Now().UnixNano() }
	lim := stages.Limits{MaxShares: uint16(o.MaxShares), MaxTotal: uint32(o.MaxTotal), TTL: o.EnvelopeTTL, Retain: o.OpenedRetention}
	seed := uint64(time.Now().UnixNano())
	for i, add := range adds {
		l := new(stages.Ledger)
		s.ledgers = append(s.ledgers, l)
		split, err := stages.NewSplit(i, s.bus, l, lim, now, seed+uint64(2*i+1))
		if err != nil {
			return err
		}
		eg := egress.New(i, s.bus, l, o.MaxPending, now)
		if o.Egress == "frame" {
			eg.WriteEachFrame()
		}
		name := func(stage string) string { return fmt.Sprintf("set%d/%s", i, stage) }
		add(stages.NewSession(i, s.bus, l, seed+uint64(2*i)), name("session"), 0)
		add(stages.NewShake(l), name("shake"), 0)
		add(split, name("split"), 0)
		add(eg, name("egress"), 256)
	}
	return nil
}

// addStage adds the next stage of a SET's chain: name for errors, maxBatch 0
// for no cap.
type addStage func(h ring.Handler[event.Event], name string, maxBatch int)

// setStages is the number of stages of a SET: session, shake, split, egress.
const setStages = 4

// newTransport returns an empty transport of o.Pipeline for one SET and how
// to add its stages, each after the one before.
func newTransport(o Options) (event.Transport, addStage, error) {
	switch o.Pipeline {
	case "disruptor":
		t, err := transport.NewDisruptor[event.Event](transport.Options{Size: o.Ring, Stages: setStages})
		if err != nil {
			return nil, nil, err
		}
		return t, func(h ring.Handler[event.Event], name string, maxBatch int) {
			t.AddStage(h, transport.StageOptions{Name: name, MaxBatch: maxBatch})
		}, nil
	case "chan":
		t, err := transport.NewChan[event.Event](transport.Options{Size: o.Ring, Stages: setStages})
		if err != nil {
			return nil, nil, err
		}
		return t, func(h ring.Handler[event.Event], name string, maxBatch int) {
			t.AddStage(h, transport.StageOptions{Name: name, MaxBatch: maxBatch})
		}, nil
	}
	wait, _ := ring.ParseWait(o.Wait)
	r, err := ring.New[event.Event](ring.Options{Size: o.Ring, Producers: ring.MultiProducer, Wait: wait, Spins: o.Spins, Yields: o.Yields,
		Fused: o.Stages == "fused"})
	if err != nil {
		return nil, nil, err
	}
	var prev *ring.Stage[event.Event]
	return r, func(h ring.Handler[event.Event], name string, maxBatch int) {
		so := ring.StageOptions[event.Event]{Name: name, MaxBatch: maxBatch}
		if prev != nil {
			so.After = []*ring.Stage[event.Event]{prev}
		}
		prev = r.AddStage(h, so)
	}, nil
}

func (s *Server) closeRings() {
	if s.bus != nil {
		s.bus.Close()
	}
}

// Start starts the stages, the event loops, the ticker and the admin API.
func (s *Server) Start() error {
	if s.bus != nil {
		for i := 0; i < s.bus.Sets(); i++ {
			if err := s.bus.Ring(i).Start(); err != nil {
				return err
			}
		}
		s.ticking = true
		go s.tick()
	} else {
		close(s.tickDone)
	}
	if err := s.ing.Start(); err != nil {
		return err
	}
	if s.admin != nil {
		go func() {
			if err := s.admin.Serve(s.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("admin server", "err", err)
			}
		}()
	}
	if goroutines := s.stageGoroutines(); s.opts.Wait == "spin" && goroutines > runtime.GOMAXPROCS(0) {
		s.log.Warn("-wait spin with more spinning stage goroutines than cores: they starve the event loops and one another; use park",
			"stage_goroutines", goroutines, "gomaxprocs", runtime.GOMAXPROCS(0))
	}
	s.log.Info("serving", "listen", s.Addrs(), "admin", s.AdminAddr(), "sets", s.opts.Sets, "ring", s.opts.Ring,
		"ingress", s.opts.Ingress, "loops", s.opts.Loops, "pipeline", s.opts.Pipeline, "egress", s.opts.Egress, "wait", s.opts.Wait, "spins", s.opts.Spins, "yields", s.opts.Yields, "stages", s.opts.Stages)
	return nil
}

// stageGoroutines is how many goroutines run the SETs' stages.
func (s *Server) stageGoroutines() int {
	switch {
	case s.bus == nil:
		return 0
	case s.opts.Stages == "fused" && s.opts.Pipeline == "ring":
		return s.opts.Sets
	}
	return 4 * s.opts.Sets // session, shake, split, egress
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
			for i := 0; i < s.bus.Sets(); i++ {
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
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Shutdown stops accepting, stops the campaigns, sends ERROR 8 to every
// client, waits (bounded by ctx) for the clients to go, drains the rings and
// stops. Answers already made are written before their connections close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.log.Info("shutting down", "conns", s.ing.Conns())
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
		for i := 0; i < s.bus.Sets(); i++ {
			r := s.bus.Ring(i)
			if seq, err := r.Claim(1); err == nil {
				*r.At(seq) = event.Event{Kind: event.KShutdown}
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
		errs = append(errs, s.bus.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Shutdown(ctx))
		s.adminLn.Close() // Shutdown closes only listeners that Serve got: not one Start never reached
	}
	return errors.Join(errs...)
}
