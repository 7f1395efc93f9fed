package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"hongbao/campaign"
	"hongbao/ledger"
)

func (s *Server) listenAdmin() error {
	ln, err := net.Listen("tcp", s.opts.Admin)
	if err != nil {
		return fmt.Errorf("-admin: %w", err)
	}
	token, err := s.opts.adminToken()
	if err != nil {
		ln.Close()
		return err
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && token == "" {
		s.log.Warn("admin API bound beyond loopback without -admin-token: anyone who reaches it can start campaigns and read profiles", "admin", ln.Addr())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /stats", s.serveStats)
	mux.HandleFunc("GET /campaigns", s.serveCampaigns)
	mux.HandleFunc("POST /campaigns/{kind}", s.startCampaign)
	mux.HandleFunc("DELETE /campaigns/{id}", s.cancelCampaign)
	mux.HandleFunc("GET /healthz", s.serveHealth)
	mux.HandleFunc("GET /cluster", s.handleCluster)
	mux.HandleFunc("GET /cluster/stats", s.handleClusterStats)
	mux.HandleFunc("POST /sets/{set}/move", s.handleMove)
	mux.HandleFunc("POST /cluster/rebalance", s.handleRebalance)
	mux.HandleFunc("POST /cluster/drain", s.handleDrain)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", serveCmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s.adminLn = ln
	s.adminCtx, s.adminCancel = context.WithCancel(context.Background())
	s.admin = &http.Server{Handler: s.authorize(token, writeDeadline(mux)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // no admin request has a body worth more
		IdleTimeout:       time.Minute,      // keep-alive: a scraper comes back within its interval
		// No WriteTimeout: writeDeadline sets one per request, long enough
		// for the profile or trace asked for.
		BaseContext: func(net.Listener) context.Context { return s.adminCtx },
	}
	// TYPE lines for the runtime and process metrics (a process-wide
	// setting of the library); serveMetrics gives them their HELP text.
	metrics.ExposeMetadata(true)
	return nil
}

// serveCmdline is pprof's /debug/pprof/cmdline with the values of the
// flags that take secrets (-auth-secret, -admin-token) redacted: a profile
// shared with whoever reads it must not carry them.
func serveCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs returns args with the value of every secret flag replaced.
func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		name, _, inline := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		if !strings.HasPrefix(out[i], "-") || !secretFlags[name] {
			continue
		}
		if inline {
			out[i] = out[i][:strings.IndexByte(out[i], '=')+1] + "REDACTED"
		} else if i+1 < len(out) {
			i++
			out[i] = "REDACTED"
		}
	}
	return out
}

// secretFlags are the flags whose value is a secret itself (the -…-file
// flags name files, which may be shown).
var secretFlags = map[string]bool{"auth-secret": true, "admin-token": true}

// authorize requires the admin token on every request when one is set.
func (s *Server) authorize(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hongbao admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong admin token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

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
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) serveCampaigns(w http.ResponseWriter, _ *http.Request) {
	if s.camps == nil {
		writeJSON(w, http.StatusOK, []campaign.Status{})
		return
	}
	writeJSON(w, http.StatusOK, s.camps.List())
}

// startCampaign serves POST /campaigns/shake and /campaigns/send.
func (s *Server) startCampaign(w http.ResponseWriter, r *http.Request) {
	if s.camps == nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": "no campaigns with -pipeline=none"})
		return
	}
	p := campaign.Params{Kind: campaign.Kind(r.PathValue("kind"))}
	if p.Kind != campaign.Shake && p.Kind != campaign.Send {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no campaign kind " + strconv.Quote(string(p.Kind)) + ": want shake or send"})
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
		if s.node != nil {
			st, bad = s.parts.Start(p)
		} else {
			var c *campaign.Campaign
			if c, bad = s.camps.Start(p); bad == nil {
				st = c.Status()
			}
		}
		if bad == nil {
			s.log.Info("campaign started", "id", st.ID, "kind", p.Kind, "rate", p.Rate, "total", p.Total)
			writeJSON(w, http.StatusOK, st)
			return
		}
		if s.refuseCampaign(w, bad) {
			return
		}
	}
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": bad.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
