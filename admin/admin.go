// Package admin is the admin HTTP API's plumbing: the listener, the bearer
// token every request must carry when one is set, a write deadline per
// request long enough for the profile or the move it asks for, Go's pprof
// with the secrets of the command line redacted, JSON answers, and a stop
// that cuts profiles short rather than let them hold a shutdown. The server
// registers the API's handlers (docs/ADMIN.md).
package admin

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// WriteTime bounds writing an admin answer; a profile or trace gets its
// duration more, a long call (Options.Long) its own bound more.
const WriteTime = 30 * time.Second

// pprofDefaultSeconds is net/http/pprof's profile duration when the request
// names none.
const pprofDefaultSeconds = 30

// grace is how long admin requests in flight at a stop get to answer once
// their contexts are cancelled.
const grace = time.Second

// Options configures the admin API.
type Options struct {
	Addr  string // where it listens
	Token string // the bearer token every request must carry; "" none
	// ReadToken is a second bearer token, for reading only: GET and HEAD
	// of the paths in Reads. "" none.
	ReadToken string
	// Reads are the paths the read token may GET: metrics, health, the
	// ledger, the views; not pprof, which costs the server CPU.
	Reads []string
	// Public are the paths anyone may GET without a token: pages that
	// hold no figure of their own.
	Public []string
	// TLS, when set, serves the API over TLS with it (a client
	// certificate asked for if it says so); nil: plain HTTP.
	TLS *tls.Config
	Log *slog.Logger
	// Long is the more time a request may take to write its answer: a move
	// waits for another gateway. 0 for the others.
	Long func(r *http.Request) time.Duration
}

// Server is the admin API: its listener and its HTTP server.
type Server struct {
	ln     net.Listener
	mux    *http.ServeMux
	srv    *http.Server
	log    *slog.Logger
	cancel context.CancelFunc
}

// Listen listens on o.Addr and routes Go's pprof under /debug/pprof/; the
// caller registers the rest with Handle, then Serve.
func Listen(o Options) (*Server, error) {
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("-admin: %w", err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && o.Token == "" {
		o.Log.Warn("admin API bound beyond loopback without -admin-token: anyone who reaches it can start campaigns and read profiles", "admin", ln.Addr())
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && o.TLS == nil && o.Token != "" {
		o.Log.Warn("admin API bound beyond loopback without -admin-tls-cert: its token travels in clear", "admin", ln.Addr())
	}
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	a := &Server{ln: ln, mux: http.NewServeMux(), log: o.Log}
	a.mux.HandleFunc("/debug/pprof/", pprof.Index)
	a.mux.HandleFunc("/debug/pprof/cmdline", serveCmdline)
	a.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	a.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	a.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	var ctx context.Context
	ctx, a.cancel = context.WithCancel(context.Background())
	a.srv = &http.Server{Handler: authorize(o, writeDeadline(o.Long, a.mux)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // no admin request has a body worth more
		IdleTimeout:       time.Minute,      // keep-alive: a scraper comes back within its interval
		// No WriteTimeout: writeDeadline sets one per request, long enough
		// for the profile or trace asked for.
		BaseContext: func(net.Listener) context.Context { return ctx },
		// The server's own errors (a TLS handshake refused) go to the log.
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn),
	}
	// TYPE lines for the runtime and process metrics (a process-wide
	// setting of the library); package exposition gives them their HELP.
	metrics.ExposeMetadata(true)
	return a, nil
}

// Handle routes pattern (net/http's, method included) to h.
func (a *Server) Handle(pattern string, h http.HandlerFunc) { a.mux.HandleFunc(pattern, h) }

// Addr is where the admin API listens.
func (a *Server) Addr() net.Addr { return a.ln.Addr() }

// Serve serves until Stop; it logs what ends it otherwise.
func (a *Server) Serve() {
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("admin API stopped", "err", err)
	}
}

// Stop stops the admin API within ctx: profiles and traces in flight see
// their request contexts cancelled and answer what they have; whatever
// still runs after a second is cut off. Neither is an error: the shutdown
// is of the clients' server, and a profile must not hold it.
func (a *Server) Stop(ctx context.Context) {
	a.cancel()
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	if err := a.srv.Shutdown(gctx); err != nil {
		a.log.Warn("admin requests still running at shutdown: cut off", "err", err)
		a.srv.Close()
	}
	a.ln.Close() // Shutdown closes only listeners that Serve got: not one Serve never reached
}

// WriteJSON answers v as JSON with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeDeadline sets each admin request's write deadline: the server-wide
// WriteTimeout would have to cover the longest profile for every request
// (and net/http/pprof refuses a profile longer than it).
func writeDeadline(long func(*http.Request) time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := WriteTime
		if long != nil {
			d += long(r)
		}
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			sec, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
			if err != nil || sec <= 0 {
				sec = pprofDefaultSeconds
			}
			d += time.Duration(min(sec, 1e6) * float64(time.Second))
		}
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
		next.ServeHTTP(w, r)
	})
}

// authorize requires the admin token on every request when one is set,
// or the read token on a GET or HEAD of one of o.Reads.
func authorize(o Options, next http.Handler) http.Handler {
	if o.Token == "" {
		return next
	}
	want := []byte("Bearer " + o.Token)
	read := []byte("Bearer " + o.ReadToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		switch {
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) && slices.Contains(o.Public, r.URL.Path):
		case subtle.ConstantTimeCompare(got, want) == 1:
		case o.ReadToken == "" || subtle.ConstantTimeCompare(got, read) != 1:
			w.Header().Set("WWW-Authenticate", `Bearer realm="hongbao admin"`)
			WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong admin token"})
			return
		case r.Method != http.MethodGet && r.Method != http.MethodHead || !slices.Contains(o.Reads, r.URL.Path):
			WriteJSON(w, http.StatusForbidden, map[string]string{"error": "the read token may only GET " + strings.Join(o.Reads, ", ") + ": this needs the admin token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveCmdline is pprof's /debug/pprof/cmdline with the values of the
// flags that take secrets (-auth-secret, -admin-token, -read-token) redacted: a profile
// shared with whoever reads it must not carry them.
func serveCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(RedactArgs(os.Args), "\x00"))
}

// RedactArgs returns args with the value of every secret flag replaced.
func RedactArgs(args []string) []string {
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
var secretFlags = map[string]bool{"auth-secret": true, "admin-token": true, "read-token": true}

// TLSConfig is the admin API's TLS configuration from the PEM files of its
// certificate and key and, if clientCA is set, of the CAs every client's
// certificate must chain to (mutual TLS); nil when certFile is empty.
func TLSConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-admin-tls-cert, -admin-tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("-admin-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-admin-tls-client-ca: no PEM certificate in %s", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
