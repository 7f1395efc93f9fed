package loadclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminTokenEnv is where the admin token comes from without -admin-token: the server's own
// variable, so that neither shows it in ps.
const AdminTokenEnv = "HONGBAO_ADMIN_TOKEN"

// -reconcile modes.
const (
	ReconcileStrict  = "strict"   // every figure's change over the run equal to the client's
	ReconcileAtLeast = "at-least" // told ≤ the change counted, the invariants exact: a server that may restart
	ReconcileOff     = "off"
)

// ReconcileReport compares the client's figures with the change of the server's over the run:
// its /stats read before the run's first request (the baseline) and again after the drain, or
// /cluster/stats when GET /cluster lists more than one gateway: the same figures summed over
// the gateways that answered. A gateway that did not answer either read fails it. Each read
// goes to the first -admin URL that answers, so that a dead gateway's does not stop it.
//
// Money the server held before the run is in the baseline, so the comparison is exact when
// this run is the server's only client during the run: the server's totals count every
// client's. Checks: the sum of SHAKE amounts equals the change of shake.got_amount, the SHAKEs
// that got one that of shake.got; the OPEN money told (OPEN 0 amounts and the shares learned
// by a repeated OPEN) that of envelopes.opened_amount, and their count that of
// envelopes.opened; every ENVELOPE pushed before the client stopped opening was opened once,
// ending with a share told; and every SEND was acknowledged ok. Opens the grace left without a
// final answer (OpenUnresolved) may hold shares drawn and never told: the summary of a
// mismatch names them.
//
// Mode at-least is for a server that may be killed and restarted during the run: an answer
// cut off by the crash is counted by the server and never told, and a push or an answer lost
// with the connection is no money (but an OPEN's share, learned by a repeated OPEN after the
// reconnect, is told). A restarted server recovers its figures from its journal, the
// baseline's money with them, so the baseline is still the zero. Checks: the change of each
// of the four server figures is at least the client's, and both ledger invariants hold
// exactly on the figures after the run (shake.created_amount = got_amount + pool_amount;
// envelopes.created_amount = opened_amount + outstanding_amount).
type ReconcileReport struct {
	OK             bool             `json:"ok"`
	Mode           string           `json:"mode,omitempty"`     // at-least; empty: strict
	Endpoint       string           `json:"endpoint,omitempty"` // what was read: /stats or /cluster/stats
	Admin          string           `json:"admin,omitempty"`    // with several -admin URLs, the one read after the run
	Gateways       int              `json:"gateways,omitempty"` // /cluster/stats: the gateways summed after the run
	Missing        []int            `json:"missing,omitempty"`  // /cluster/stats: the nodes that did not answer after the run
	Baseline       *Figures         `json:"baseline,omitempty"` // the server's figures before the run's first request
	After          *Figures         `json:"after,omitempty"`    // the same after the drain: a server figure compared is After − Baseline
	Checks         []Check          `json:"checks"`
	InFlight       map[string]int64 `json:"in_flight,omitempty"`       // still unanswered when the grace ran out
	OpenUnresolved int64            `json:"open_unresolved,omitempty"` // opens without a final answer when the grace ran out: each may hold a share drawn, never told
	Err            string           `json:"error,omitempty"`           // the figures could not be read, or not from every gateway
}

// Figures are the server's figures a reconciliation compares, as one read of /stats or
// /cluster/stats told them, with the gateways summed and missing for /cluster/stats.
type Figures struct {
	Got          int64 `json:"shake.got"`
	GotAmount    int64 `json:"shake.got_amount"`
	Opened       int64 `json:"envelopes.opened"`
	OpenedAmount int64 `json:"envelopes.opened_amount"`
	Gateways     int   `json:"gateways,omitempty"`
	Missing      []int `json:"missing,omitempty"`
}

// Check is one figure compared: Want is the reference (the change of the server's figure over
// the run; for an invariant its left side; for a client-only check what every push or request
// should have led to), Got the client's.
type Check struct {
	Figure string `json:"figure"`
	Want   int64  `json:"want"`
	Got    int64  `json:"got"`
	Diff   int64  `json:"diff"` // Got − Want
	Note   string `json:"note"`
	AtMost bool   `json:"at_most,omitempty"` // ok when Got ≤ Want (at-least), else when equal
}

// ok reports whether the check holds.
func (c Check) ok() bool { return c.Diff == 0 || c.AtMost && c.Diff < 0 }

// Summary says in one line what was compared, whether the reconciliation passed, and if not
// which figures differ and by how much.
func (r *ReconcileReport) Summary() string {
	var from []string
	switch {
	case r.Endpoint == pathClusterStats:
		from = append(from, fmt.Sprintf("%s, %d gateways", r.Endpoint, r.Gateways))
	case r.Endpoint != "":
		from = append(from, r.Endpoint)
	}
	if r.Admin != "" {
		from = append(from, "from "+r.Admin)
	}
	if r.Baseline != nil {
		from = append(from, "change since the baseline")
	}
	head := "reconcile"
	if len(from) > 0 {
		head += " (" + strings.Join(from, ", ") + ")"
	}
	if r.Err != "" {
		return head + ": FAILED: " + r.Err
	}
	var bad []string
	for _, c := range r.Checks {
		if !c.ok() {
			rel := "want"
			if c.AtMost {
				rel = "want at most"
			}
			bad = append(bad, fmt.Sprintf("%s: %s %d (%s), got %d, off by %+d", c.Figure, rel, c.Want, c.Note, c.Got, c.Diff))
		}
	}
	if len(bad) == 0 && r.Mode == ReconcileAtLeast {
		var untold []string
		for _, c := range r.Checks {
			if c.AtMost {
				untold = append(untold, fmt.Sprintf("%s %+d", c.Figure, -c.Diff))
			}
		}
		return fmt.Sprintf("%s at-least: ok, %d checks; counted, never told: %s", head, len(r.Checks), strings.Join(untold, ", "))
	}
	if len(bad) == 0 {
		return fmt.Sprintf("%s: ok, %d figures agree with the server", head, len(r.Checks))
	}
	s := head + ": MISMATCH: " + strings.Join(bad, "; ")
	if len(r.InFlight) > 0 {
		s += fmt.Sprintf("; still in flight after the grace: %v", r.InFlight)
	}
	if r.OpenUnresolved > 0 {
		s += fmt.Sprintf("; %d opens without a final answer after the grace: each may hold a share drawn and never told", r.OpenUnresolved)
	}
	return s
}

// Admin paths the reconciliation reads.
const (
	pathStats        = "/stats"
	pathCluster      = "/cluster"
	pathClusterStats = "/cluster/stats"
)

// serverStats is the part of GET /stats (or /cluster/stats) the reconciliation reads.
type serverStats struct {
	Gateways *int   `json:"gateways"` // /cluster/stats only: the gateways that answered
	Missing  []int  `json:"missing"`  // /cluster/stats only: the nodes that did not
	from     string // the admin URL that answered

	Shake struct {
		Got           *int64 `json:"got"`
		GotAmount     *int64 `json:"got_amount"`
		CreatedAmount int64  `json:"created_amount"`
		PoolAmount    int64  `json:"pool_amount"`
	} `json:"shake"`
	Envelopes struct {
		Opened            *int64 `json:"opened"`
		OpenedAmount      *int64 `json:"opened_amount"`
		CreatedAmount     int64  `json:"created_amount"`
		OutstandingAmount int64  `json:"outstanding_amount"`
	} `json:"envelopes"`
}

// adminURLs splits -admin into its base URLs: comma-separated, a bare host:port is http.
func adminURLs(admin string) []string {
	var out []string
	for _, a := range strings.Split(admin, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = "http://" + a
		}
		out = append(out, strings.TrimRight(a, "/"))
	}
	return out
}

// adminGet reads GET path from the first admin URL of -admin that answers: its status, at
// most 1 MiB of its body, and the URL that answered. One that cannot be reached or answers
// 5xx gives way to the next, for the gateway it names may be the one that died; the last
// one's answer stands.
func adminGet(cfg *Config, path string) (status int, body []byte, from string, err error) {
	urls := adminURLs(cfg.Admin)
	var errs []error
	for i, base := range urls {
		status, body, err = adminGetOne(cfg, base, path)
		last := i == len(urls)-1
		switch {
		case err == nil && (status < 500 || last):
			return status, body, base, nil
		case err == nil:
			errs = append(errs, fmt.Errorf("%s%s answered %d %s", base, path, status, http.StatusText(status)))
		default:
			errs = append(errs, err)
		}
	}
	if len(urls) == 0 {
		errs = append(errs, fmt.Errorf("-admin %q names no URL", cfg.Admin))
	}
	return 0, nil, "", fmt.Errorf("cannot read the server's %s: %w", path, errors.Join(errs...))
}

// adminGetOne reads GET path from the admin API at base.
func adminGetOne(cfg *Config, base, path string) (status int, body []byte, err error) {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("-admin %q: %w", base, err)
	}
	if cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.AdminToken)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s%s: %w", base, path, err)
	}
	return resp.StatusCode, body, nil
}

// statsPath asks GET /cluster which figures to read: /cluster/stats when it lists more than
// one gateway, /stats when it lists one or answers 404 (a server on its own).
func statsPath(cfg *Config) (string, error) {
	status, body, _, err := adminGet(cfg, pathCluster)
	if err != nil {
		return "", err
	}
	switch status {
	case http.StatusNotFound:
		return pathStats, nil
	case http.StatusOK:
	default:
		return "", fmt.Errorf("server's %s answered %d %s: %.200s", pathCluster, status, http.StatusText(status), body)
	}
	var cl struct {
		Gateways []json.RawMessage `json:"gateways"`
	}
	if err := json.Unmarshal(body, &cl); err != nil {
		return "", fmt.Errorf("cannot parse the server's %s: %w", pathCluster, err)
	}
	if len(cl.Gateways) > 1 {
		return pathClusterStats, nil
	}
	return pathStats, nil
}

// fetchStats reads the server's figures from path, /stats or /cluster/stats.
func fetchStats(cfg *Config, path string) (*serverStats, error) {
	status, body, from, err := adminGet(cfg, path)
	if err != nil {
		return nil, err
	}

	if status != http.StatusOK {
		return nil, fmt.Errorf("server's %s answered %d %s: %.200s", path, status, http.StatusText(status), body)
	}
	st := serverStats{from: from}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("cannot parse the server's %s: %w", path, err)
	}
	for name, p := range map[string]*int64{
		"shake.got": st.Shake.Got, "shake.got_amount": st.Shake.GotAmount,
		"envelopes.opened": st.Envelopes.Opened, "envelopes.opened_amount": st.Envelopes.OpenedAmount,
	} {
		if p == nil {
			return nil, fmt.Errorf("the server's %s has no %s", path, name)
		}
	}
	if path == pathClusterStats && st.Gateways == nil {
		return nil, fmt.Errorf("the server's %s has no gateways", path)
	}
	return &st, nil
}

// figures returns the figures of st a reconciliation compares.
func (st *serverStats) figures() *Figures {
	f := &Figures{Got: *st.Shake.Got, GotAmount: *st.Shake.GotAmount,
		Opened: *st.Envelopes.Opened, OpenedAmount: *st.Envelopes.OpenedAmount, Missing: st.Missing}
	if st.Gateways != nil {
		f.Gateways = *st.Gateways
	}
	return f
}

// baseline is the reconciliation's zero: the server's figures before the run's first request,
// and where they were read, where they are read again after the run.
type baseline struct {
	path string // /stats, or /cluster/stats when GET /cluster lists several gateways
	st   *serverStats
}

// readBaseline reads the baseline. It must come before the first connection: a login may
// bring pushes kept from before, and their OPENs are the run's money.
func readBaseline(cfg *Config) (*baseline, error) {
	path, err := statsPath(cfg)
	if err != nil {
		return nil, fmt.Errorf("-reconcile %s: the baseline before the run: %w", cfg.Reconcile, err)
	}
	st, err := fetchStats(cfg, path)
	if err != nil {
		return nil, fmt.Errorf("-reconcile %s: the baseline before the run: %w", cfg.Reconcile, err)
	}
	return &baseline{path: path, st: st}, nil
}

// reconcile compares c, the figures after the drain, with the change of the server's since
// base. drained is false when answers were still in flight when the grace ran out.
func reconcile(cfg *Config, base *baseline, c *counters, drained bool) *ReconcileReport {
	r := &ReconcileReport{Endpoint: base.path, Baseline: base.st.figures(), OpenUnresolved: c.OpenPending}
	if !drained {
		r.InFlight = map[string]int64{}
		for k := range nReq {
			if n := c.inflight(k); n != 0 {
				r.InFlight[reqNames[k]] = n
			}
		}
	}
	if cfg.Reconcile == ReconcileAtLeast {
		return reconcileAtLeast(cfg, r, c)
	}
	st, err := fetchStats(cfg, base.path)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.After = st.figures()
	r.Admin = adminRead(cfg, st)
	r.Checks = strictChecks(r.Baseline, r.After, c)
	r.verdict()
	return r
}

// adminRead returns the admin URL st was read from when -admin names several, else "".
func adminRead(cfg *Config, st *serverStats) string {
	if len(adminURLs(cfg.Admin)) > 1 {
		return st.from
	}
	return ""
}

// strictChecks compares c with the change of the server's figures from before to after, each
// exactly, and the client's own figures with each other.
func strictChecks(before, after *Figures, c *counters) []Check {
	var cs []Check
	add := func(figure, note string, want, got int64) {
		cs = append(cs, Check{Figure: figure, Want: want, Got: got, Diff: got - want, Note: note})
	}
	add("shake.got_amount", "server", after.GotAmount-before.GotAmount, int64(c.ShakeAmount))
	add("shake.got", "server", after.Got-before.Got, int64(c.Status[reqShake][1]))
	// The OPEN money told: OPEN 0 amounts and the shares learned by a repeated OPEN (a re-sent
	// OPEN answered 1: drawn by an OPEN of the same open whose answer never came).
	add("envelopes.opened_amount", "server", after.OpenedAmount-before.OpenedAmount, int64(c.OpenAmount))
	add("envelopes.opened", "server", after.Opened-before.Opened, int64(opensTold(c)))
	// Each push received while opening (not holding) and not repeating an open under way starts
	// an open: one first OPEN, then a re-send for each OPEN answered 5 or in flight when its
	// connection ended. An open ends with exactly one final answer (status 0 to 4) or is
	// unresolved at the end (OpenPending). So
	//	pushes − unopened − repeated = Σ final answers + unresolved,
	// and in a run where the server tells every recipient its share, every final answer is a
	// 0 or a 1 to a re-send:
	//	pushes − unopened − repeated − unresolved = OPEN 0 + learned.
	// A 1 to a first OPEN (a push of an envelope opened before) and 2, 3, 4 break it.
	add("ENVELOPE pushes opened ok", "pushes received while opening, less repeats and opens unresolved at the end",
		int64(c.Pushes[pushEnvelope]-c.Unopened-c.Repeated)-c.OpenPending, int64(opensTold(c)))
	// A SEND answered "overloaded" (retry), or in flight at ERROR 9 (moved), was not carried out.
	notDone := c.NotDone[reqSend] + c.Status[reqSend][overloadStatus[reqSend]]
	add("SEND acknowledged ok", "SENDs sent, less those not carried out", int64(c.Sent[reqSend]-notDone), int64(c.Status[reqSend][0]))
	return cs
}

// opensTold returns the shares the OPENs told: answered 0, or learned by a repeated OPEN.
func opensTold(c *counters) uint64 { return c.Status[reqOpen][0] + c.Learned }

// atLeastChecks compares c with the change of the server's figures from before to after, each
// at least the client's, and checks both ledger invariants on st, the figures after.
func atLeastChecks(before *Figures, st *serverStats, c *counters) []Check {
	var cs []Check
	after := st.figures()
	told := func(figure string, server int64, client uint64) {
		cs = append(cs, Check{Figure: figure, Want: server, Got: int64(client), Diff: int64(client) - server, Note: "server, at least the client's", AtMost: true})
	}
	told("shake.got_amount", after.GotAmount-before.GotAmount, c.ShakeAmount)
	told("shake.got", after.Got-before.Got, c.Status[reqShake][1])
	told("envelopes.opened_amount", after.OpenedAmount-before.OpenedAmount, c.OpenAmount)
	told("envelopes.opened", after.Opened-before.Opened, opensTold(c))
	s, e := &st.Shake, &st.Envelopes
	left, right := s.CreatedAmount, *s.GotAmount+s.PoolAmount
	cs = append(cs, Check{Figure: "shake.got_amount + pool_amount", Want: left, Got: right, Diff: right - left, Note: "shake.created_amount"})
	left, right = e.CreatedAmount, *e.OpenedAmount+e.OutstandingAmount
	cs = append(cs, Check{Figure: "envelopes.opened_amount + outstanding_amount", Want: left, Got: right, Diff: right - left, Note: "envelopes.created_amount"})
	return cs
}

// verdict sets r's gateways and missing nodes from r.After, and r.OK: every check holds and
// no gateway node is missing from the sums, before the run or after it.
func (r *ReconcileReport) verdict() {
	r.Gateways, r.Missing, r.Err = r.After.Gateways, r.After.Missing, ""
	r.OK = len(r.Missing) == 0 && len(r.Baseline.Missing) == 0
	for _, ch := range r.Checks {
		r.OK = r.OK && ch.ok()
	}
	switch {
	case len(r.Missing) > 0:
		r.Err = fmt.Sprintf("gateway nodes %v did not answer %s: its sums leave them out", r.Missing, r.Endpoint)
	case len(r.Baseline.Missing) > 0:
		r.Err = fmt.Sprintf("gateway nodes %v did not answer %s before the run: the baseline leaves them out", r.Baseline.Missing, r.Endpoint)
	}
}

// reconcileAtLeast is reconcile's at-least mode: the client's money and counts at most the
// change of the server's, both ledger invariants exact. The invariants may be read between
// two changes of one event; it reads again, for up to two seconds, until they hold.
func reconcileAtLeast(cfg *Config, r *ReconcileReport, c *counters) *ReconcileReport {
	r.Mode = ReconcileAtLeast
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := fetchStats(cfg, r.Endpoint)
		if err != nil {
			r.Err = err.Error()
			return r
		}
		r.After = st.figures()
		r.Admin = adminRead(cfg, st)
		r.Checks = atLeastChecks(r.Baseline, st, c)
		r.verdict()
		if r.OK || time.Now().After(deadline) {
			return r
		}
	}
}
