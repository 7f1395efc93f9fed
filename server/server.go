// Package server wires hongbao together: the ingress event loops, one ring
// per SET with its stages (session → shake → split → egress), the campaign
// producers and the admin HTTP API; and it runs the graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	if o.Pipeline == "ring" {
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

// buildSETs makes one ring per SET with its chain of stages.
func (s *Server) buildSETs() error {
	o := s.opts
	wait, _ := ring.ParseWait(o.Wait)
	rings := make([]*event.Ring, o.Sets)
	for i := range rings {
		r, err := ring.New[event.Event](ring.Options{Size: o.Ring, Producers: ring.MultiProducer, Wait: wait})
		if err != nil {
			return err
		}
		rings[i] = r
	}
	// Requests may fill a ring only to 7/8: the rest stays for answers and
	// overload replies, which must never be refused for room.
	s.bus = event.NewBus(rings, o.Ring/8)
	now := func() int64 { return time.Now().UnixNano() }
	lim := stages.Limits{MaxShares: uint16(o.MaxShares), MaxTotal: uint32(o.MaxTotal), TTL: o.EnvelopeTTL}
	seed := uint64(time.Now().UnixNano())
	for i, r := range rings {
		l := new(stages.Ledger)
		s.ledgers = append(s.ledgers, l)
		split, err := stages.NewSplit(i, s.bus, l, lim, now, seed+uint64(2*i+1))
		if err != nil {
			return err
		}
		name := func(stage string) string { return fmt.Sprintf("set%d/%s", i, stage) }
		session := r.AddStage(stages.NewSession(i, s.bus, l, seed+uint64(2*i)), ring.StageOptions[event.Event]{Name: name("session")})
		shake := r.AddStage(stages.NewShake(l), ring.StageOptions[event.Event]{Name: name("shake"), After: []*ring.Stage[event.Event]{session}})
		sp := r.AddStage(split, ring.StageOptions[event.Event]{Name: name("split"), After: []*ring.Stage[event.Event]{shake}})
		r.AddStage(egress.New(i, s.bus, l, o.MaxPending, now), ring.StageOptions[event.Event]{Name: name("egress"),
			After: []*ring.Stage[event.Event]{sp}, MaxBatch: 256})
	}
	return nil
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
	s.log.Info("serving", "listen", s.Addrs(), "admin", s.AdminAddr(), "sets", s.opts.Sets, "ring", s.opts.Ring,
		"ingress", s.opts.Ingress, "loops", s.opts.Loops, "pipeline", s.opts.Pipeline, "wait", s.opts.Wait)
	return nil
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
		errs = append(errs, s.bus.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Shutdown(ctx))
		s.adminLn.Close() // Shutdown closes only listeners that Serve got: not one Start never reached
	}
	return errors.Join(errs...)
}
