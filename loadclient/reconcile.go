package loadclient

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ReconcileReport compares the client's figures with the server's /stats after the run.
//
// It is exact only when this run is the server's only client since the server started (or
// since its ledger was last zeroed): the server's totals count every client. Checks:
// the sum of SHAKE amounts equals shake.got_amount, the SHAKEs that got one equal shake.got,
// the sum of OPEN amounts equals envelopes.opened_amount, the OPENs answered ok equal
// envelopes.opened, every ENVELOPE pushed was opened once (OPEN ok), and every SEND was
// acknowledged ok.
type ReconcileReport struct {
	OK       bool             `json:"ok"`
	Checks   []Check          `json:"checks"`
	InFlight map[string]int64 `json:"in_flight,omitempty"` // still unanswered when the grace ran out
	Err      string           `json:"error,omitempty"`     // /stats could not be read
}

// Check is one figure compared: Want is the reference (the server's, or for a client-only
// check what every push or request should have led to), Got the client's.
type Check struct {
	Figure string `json:"figure"`
	Want   int64  `json:"want"`
	Got    int64  `json:"got"`
	Diff   int64  `json:"diff"` // Got − Want
	Note   string `json:"note"`
}

// Summary says in one line whether the reconciliation passed, and if not which figures
// differ and by how much.
func (r *ReconcileReport) Summary() string {
	if r.Err != "" {
		return "reconcile: FAILED: " + r.Err
	}
	var bad []string
	for _, c := range r.Checks {
		if c.Diff != 0 {
			bad = append(bad, fmt.Sprintf("%s: want %d (%s), got %d, off by %+d", c.Figure, c.Want, c.Note, c.Got, c.Diff))
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("reconcile: ok, %d figures agree with the server", len(r.Checks))
	}
	s := "reconcile: MISMATCH: " + strings.Join(bad, "; ")
	if len(r.InFlight) > 0 {
		s += fmt.Sprintf("; still in flight after the grace: %v", r.InFlight)
	}
	return s
}

// serverStats is the part of GET /stats the reconciliation reads.
type serverStats struct {
	Shake struct {
		Got       *int64 `json:"got"`
		GotAmount *int64 `json:"got_amount"`
	} `json:"shake"`
	Envelopes struct {
		Opened       *int64 `json:"opened"`
		OpenedAmount *int64 `json:"opened_amount"`
	} `json:"envelopes"`
}

// adminURL turns -admin into a base URL: a bare host:port is http.
func adminURL(admin string) string {
	if !strings.Contains(admin, "://") {
		admin = "http://" + admin
	}
	return strings.TrimRight(admin, "/")
}

// fetchStats reads the server's /stats.
func fetchStats(cfg *Config) (*serverStats, error) {
	req, err := http.NewRequest(http.MethodGet, adminURL(cfg.Admin)+"/stats", nil)
	if err != nil {
		return nil, fmt.Errorf("-admin %q: %w", cfg.Admin, err)
	}
	if cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot read the server's /stats: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("cannot read the server's /stats: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("server's /stats answered %s: %.200s", resp.Status, body)
	}
	var st serverStats
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("cannot parse the server's /stats: %w", err)
	}
	for name, p := range map[string]*int64{
		"shake.got": st.Shake.Got, "shake.got_amount": st.Shake.GotAmount,
		"envelopes.opened": st.Envelopes.Opened, "envelopes.opened_amount": st.Envelopes.OpenedAmount,
	} {
		if p == nil {
			return nil, fmt.Errorf("the server's /stats has no %s", name)
		}
	}
	return &st, nil
}

// reconcile compares c, the figures after the drain, with the server's /stats. drained is
// false when answers were still in flight when the grace ran out.
func reconcile(cfg *Config, c *counters, drained bool) *ReconcileReport {
	r := &ReconcileReport{}
	if !drained {
		r.InFlight = map[string]int64{}
		for k := range nReq {
			if n := c.inflight(k); n != 0 {
				r.InFlight[reqNames[k]] = n
			}
		}
	}
	st, err := fetchStats(cfg)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	add := func(figure, note string, want, got int64) {
		r.Checks = append(r.Checks, Check{Figure: figure, Want: want, Got: got, Diff: got - want, Note: note})
	}
	add("shake.got_amount", "server", *st.Shake.GotAmount, int64(c.ShakeAmount))
	add("shake.got", "server", *st.Shake.Got, int64(c.Status[reqShake][1]))
	add("envelopes.opened_amount", "server", *st.Envelopes.OpenedAmount, int64(c.OpenAmount))
	add("envelopes.opened", "server", *st.Envelopes.Opened, int64(c.Status[reqOpen][0]))
	add("ENVELOPE pushes opened ok", "pushes received", int64(c.Pushes[pushEnvelope]), int64(c.Status[reqOpen][0]))
	add("SEND acknowledged ok", "SENDs sent", int64(c.Sent[reqSend]), int64(c.Status[reqSend][0]))
	r.OK = true
	for _, ch := range r.Checks {
		r.OK = r.OK && ch.Diff == 0
	}
	return r
}
