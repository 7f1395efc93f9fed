package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/admin"
	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/console"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/replicated"
)

// listenAdmin opens the admin API (package admin) and routes its calls.
func (s *Server) listenAdmin() error {
	token, err := s.opts.adminToken()
	if err != nil {
		return err
	}
	read, err := s.opts.readToken(token)
	if err != nil {
		return err
	}
	tlsCfg, err := admin.TLSConfig(s.opts.AdminTLSCert, s.opts.AdminTLSKey, s.opts.AdminTLSCA)
	if err != nil {
		return err
	}
	a, err := admin.Listen(admin.Options{Addr: s.opts.Admin, Token: token, ReadToken: read, Reads: readPaths, Public: publicPaths, TLS: tlsCfg, Log: s.log, Long: func(r *http.Request) time.Duration {
		if strings.HasPrefix(r.URL.Path, "/sets/") || r.URL.Path == "/cluster/rebalance" {
			return replicated.MoveTimeout // a move waits for another gateway
		}
		return 0
	}})
	if err != nil {
		return err
	}
	a.Handle("GET /metrics", s.serveMetrics)
	a.Handle("GET /stats", s.serveStats)
	a.Handle("GET /campaigns", s.serveCampaigns)
	a.Handle("POST /campaigns/{kind}", s.startCampaign)
	a.Handle("DELETE /campaigns/{id}", s.cancelCampaign)
	a.Handle("GET /healthz", s.serveHealth)
	a.Handle("GET /cluster", s.handleCluster)
	a.Handle("GET /cluster/stats", s.handleClusterStats)
	a.Handle("POST /sets/{set}/move", s.handleMove)
	a.Handle("POST /cluster/rebalance", s.handleRebalance)
	a.Handle("POST /cluster/drain", s.handleDrain)
	a.Handle("GET "+console.PagePath, console.ServePage)
	a.Handle("GET "+console.ScriptPath, console.ServeScript)
	a.Handle("GET /console/data", s.serveConsoleData)
	s.admin = a
	return nil
}

// readPaths are what -read-token may GET: what a scraper, a health check
// and a dashboard read.
var readPaths = []string{"/metrics", "/healthz", "/stats", "/campaigns", "/cluster", "/cluster/stats", "/console/data"}

// publicPaths are served without a token: the live console's page and
// script, which hold no figure (their requests for the figures carry one).
var publicPaths = []string{console.PagePath, console.ScriptPath}

// Stats sums the ledger now.
func (s *Server) Stats() Stats {
	st := ledger.Sum(s.ledgers())
	ist := s.ing.Stats()
	st.Connections = int64(s.ing.Conns())
	st.Shake.Overload = ist.Overload.Shake
	st.Shake.Requests += ist.Overload.Shake
	st.Envelopes.Overload = ist.Overload.Open + ist.Overload.Send
	st.Chat.Overload = ist.Overload.Chat
	st.Chat.Limited = ist.ChatLimited
	if s.bus == nil { // bare I/O: ingress answers shakes itself
		st.Logins = ist.Logins
		st.Shake.Requests = ist.Frames.Shake
		st.Shake.Empty = ist.Frames.Shake
	}
	return st
}

func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	admin.WriteJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) serveCampaigns(w http.ResponseWriter, _ *http.Request) {
	if s.camps == nil {
		admin.WriteJSON(w, http.StatusOK, []campaign.Status{})
		return
	}
	admin.WriteJSON(w, http.StatusOK, s.camps.List())
}

// startCampaign serves POST /campaigns/shake and /campaigns/send.
func (s *Server) startCampaign(w http.ResponseWriter, r *http.Request) {
	if s.camps == nil {
		admin.WriteJSON(w, http.StatusConflict, map[string]string{"error": "no campaigns with -pipeline=none"})
		return
	}
	p := campaign.Params{Kind: campaign.Kind(r.PathValue("kind"))}
	if p.Kind != campaign.Shake && p.Kind != campaign.Send {
		admin.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no campaign kind " + strconv.Quote(string(p.Kind)) + ": want shake or send"})
		return
	}
	q := r.URL.Query()
	var bad error
	num := func(name string, bits int, required bool) uint64 {
		v := q.Get(name)
		if v == "" {
			if required && bad == nil {
				bad = fmt.Errorf("%s: missing", name)
			}
			return 0
		}
		n, err := strconv.ParseUint(v, 10, bits)
		if err != nil && bad == nil {
			bad = fmt.Errorf("%s=%q: not a whole number in range", name, v)
		}
		return n
	}
	p.Rate = num("rate", 64, true)
	p.Total = num("total", 64, true)
	p.Min = uint32(num("min", 32, true))
	p.Max = uint32(num("max", 32, true))
	if p.Kind == campaign.Send {
		p.Recipients = uint16(num("recipients", 16, true))
	}
	if bad == nil {
		var st campaign.Status
		if s.parts != nil {
			st, bad = s.parts.Start(p)
		} else {
			var c *campaign.Campaign
			if c, bad = s.camps.Start(p); bad == nil {
				st = c.Status()
			}
		}
		if bad == nil {
			s.log.Info("campaign started", "id", st.ID, "kind", p.Kind, "rate", p.Rate, "total", p.Total)
			admin.WriteJSON(w, http.StatusOK, st)
			return
		}
		if s.refuseCampaign(w, bad) {
			return
		}
	}
	admin.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": bad.Error()})
}
