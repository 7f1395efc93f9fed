// Package hongbaotest runs a hongbao server inside a test's process, on a
// loopback port the kernel picks, as net/http/httptest does for HTTP: for
// the tests of an application that speaks to hongbao through package
// client.
//
//	srv := hongbaotest.NewServer(t)
//	srv.Shake(t, 1000, 100, 500) // the pools filled: 1,000 envelopes of 1.00–5.00 yuan
//	c, err := client.Dial(ctx, []string{srv.Addr})
//
// The server is the real one (package server), with no journal (nothing
// durable, nothing written to disk) unless an option asks for one, and its
// admin API on loopback with a token of its own.
package hongbaotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/server"
)

// Server is a hongbao server running in this process.
type Server struct {
	Addr  string // the client listener, host:port: what client.Dial takes
	Admin string // the admin API's base URL, http://host:port
	Token string // the admin API's bearer token

	srv *server.Server
}

// Start starts a server on loopback with options opts changes from the
// test defaults (no journal; one SET, so that every user shakes from the
// same pool; one event loop; logs discarded): for an example or a
// TestMain, which have no testing.TB; Close stops it.
func Start(opts ...func(*server.Options)) (*Server, error) {
	tok := make([]byte, 16)
	rand.Read(tok)
	o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", AdminToken: hex.EncodeToString(tok),
		Sets: 1, Ring: 1024, Loops: 1, Journal: "off"}
	for _, f := range opts {
		f(&o)
	}
	o.Fill()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s, err := server.New(o, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	hs := &Server{Addr: s.Addrs()[0].String(), Token: o.AdminToken, srv: s}
	if a := s.AdminAddr(); a != "" {
		hs.Admin = "http://" + a
	}
	return hs, nil
}

// NewServer starts a server for the test tb (see Start), fails tb if it
// cannot, and stops it when tb ends.
func NewServer(tb testing.TB, opts ...func(*server.Options)) *Server {
	tb.Helper()
	s, err := Start(opts...)
	if err != nil {
		tb.Fatalf("hongbaotest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Close shuts the server down: its clients are told ERROR 8.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}

// Stats is the server's ledger (GET /stats): what it dealt, what was got,
// opened and sent.
func (s *Server) Stats() server.Stats { return s.srv.Stats() }

// StartCampaign starts a campaign over the admin API (docs/ADMIN.md):
// kind "shake" deals envelopes of lo..hi fen into the pools, "send" sends
// group envelopes of lo..hi fen to recipients users online; rate a second,
// total in all. It returns the campaign's id.
func (s *Server) StartCampaign(ctx context.Context, kind string, rate, total, lo, hi, recipients int) (int, error) {
	q := url.Values{"rate": {strconv.Itoa(rate)}, "total": {strconv.Itoa(total)}, "min": {strconv.Itoa(lo)}, "max": {strconv.Itoa(hi)}}
	if kind == "send" {
		q.Set("recipients", strconv.Itoa(recipients))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Admin+"/campaigns/"+url.PathEscape(kind)+"?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("hongbaotest: POST /campaigns/%s: %s: %s", kind, resp.Status, body)
	}
	var c struct {
		ID int `json:"id"`
	}
	return c.ID, json.Unmarshal(body, &c)
}

// Shake fills the pools for tb: a shake campaign of total envelopes of
// lo..hi fen, dealt within a second, waited for until every one is in a
// pool.
func (s *Server) Shake(tb testing.TB, total, lo, hi int) {
	tb.Helper()
	if err := s.Fill(context.Background(), total, lo, hi); err != nil {
		tb.Fatal(err)
	}
}

// Fill is Shake for an example or a TestMain.
func (s *Server) Fill(ctx context.Context, total, lo, hi int) error {
	before := s.Stats().Shake.Created
	if _, err := s.StartCampaign(ctx, "shake", max(total, 1000), total, lo, hi, 0); err != nil {
		return err
	}
	for s.Stats().Shake.Created < before+uint64(total) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
