package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// Admin talks to a server's admin API. Safe for concurrent use.
type Admin struct {
	URL    string // http://host:port
	client *http.Client
}

// NewAdmin returns an Admin for the API at addr (host:port).
func NewAdmin(addr string) *Admin {
	return &Admin{URL: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
}

// Get reads path and returns the body of a 200 answer.
func (a *Admin) Get(path string) ([]byte, error) { return a.do(http.MethodGet, path, nil) }

// do sends method path and returns the body of a 200 answer, decoded into
// v too unless v is nil.
func (a *Admin) do(method, path string, v any) ([]byte, error) {
	req, err := http.NewRequest(method, a.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			return body, fmt.Errorf("cannot parse %s: %w", path, err)
		}
	}
	return body, nil
}

// getJSON reads path into v.
func (a *Admin) getJSON(path string, v any) error {
	_, err := a.do(http.MethodGet, path, v)
	return err
}

// Stats is the part of GET /stats that the perf tools read (docs/PROTOCOL.md's
// fields and the server's extras).
type Stats struct {
	Connections int64 `json:"connections"`
	Logins      int64 `json:"logins"`
	Shake       struct {
		Requests      int64 `json:"requests"`
		Got           int64 `json:"got"`
		GotAmount     int64 `json:"got_amount"`
		Empty         int64 `json:"empty"`
		Overload      int64 `json:"overload"`
		Created       int64 `json:"created"`
		CreatedAmount int64 `json:"created_amount"`
		Pool          int64 `json:"pool"`
		PoolAmount    int64 `json:"pool_amount"`
		Returned      int64 `json:"returned"`
	} `json:"shake"`
	Envelopes struct {
		Created           int64 `json:"created"`
		CreatedAmount     int64 `json:"created_amount"`
		Opened            int64 `json:"opened"`
		OpenedAmount      int64 `json:"opened_amount"`
		OutstandingAmount int64 `json:"outstanding_amount"`
		LiveAmount        int64 `json:"live_amount"`
		Refunded          int64 `json:"refunded"`
		RefundedAmount    int64 `json:"refunded_amount"`
		Overload          int64 `json:"overload"`
		SendInvalid       int64 `json:"send_invalid"`
		SystemSkipped     int64 `json:"system_skipped"`
	} `json:"envelopes"`
}

// Stats reads GET /stats; raw is the body as the server wrote it.
func (a *Admin) Stats() (st Stats, raw []byte, err error) {
	raw, err = a.do(http.MethodGet, "/stats", &st)
	return st, raw, err
}

// WaitConnections polls /stats until connections == n (and, when logins is
// true, logins ≥ n) or the timeout passes; it returns the last Stats.
func (a *Admin) WaitConnections(n int64, logins bool, timeout time.Duration) (st Stats, err error) {
	err = Poll(timeout, 50*time.Millisecond, func() error {
		if st, _, err = a.Stats(); err == nil && (st.Connections != n || logins && st.Logins < n) {
			err = fmt.Errorf("server has %d connections (%d logins) after %v; want %d", st.Connections, st.Logins, timeout, n)
		}
		return err
	})
	return st, err
}

// Campaign is a campaign as POST /campaigns/{kind} and GET /campaigns answer.
type Campaign struct {
	ID         int    `json:"id"`
	Kind       string `json:"kind"`
	Rate       uint64 `json:"rate"`
	Total      uint64 `json:"total"`
	Min        uint32 `json:"min"`
	Max        uint32 `json:"max"`
	Recipients uint16 `json:"recipients"`
	Dealt      uint64 `json:"dealt"`
	Amount     uint64 `json:"amount"`
	Sets       int    `json:"sets"` // the SETs, run by the gateway asked, that hold a share of it
	Done       bool   `json:"done"`
}

// StartCampaign posts a campaign of kind (shake or send) with the query
// parameters q.
func (a *Admin) StartCampaign(kind string, q url.Values) (c Campaign, err error) {
	_, err = a.do(http.MethodPost, "/campaigns/"+kind+"?"+q.Encode(), &c)
	return c, err
}

// Campaigns reads GET /campaigns; raw is the body.
func (a *Admin) Campaigns() (list []Campaign, raw []byte, err error) {
	raw, err = a.do(http.MethodGet, "/campaigns", &list)
	return list, raw, err
}

// WaitCampaigns waits until every campaign is done, polling GET /campaigns.
func (a *Admin) WaitCampaigns(timeout time.Duration) error {
	return Poll(timeout, 100*time.Millisecond, func() error {
		list, _, err := a.Campaigns()
		for _, c := range list {
			if err == nil && !c.Done {
				err = errors.New("running")
			}
		}
		if err != nil {
			return fmt.Errorf("campaigns not done %v after the load: %v", timeout, err)
		}
		return nil
	})
}

// GC makes the server collect garbage now, through the heap profile's gc=1
// (net/http/pprof runs runtime.GC first), so that heap figures read right
// after count live memory rather than garbage waiting for the next cycle.
func (a *Admin) GC() error {
	_, err := a.Get("/debug/pprof/heap?gc=1")
	return err
}

// Metrics reads GET /metrics into a map from series (name with labels) to
// value (runlog.ParseMetrics).
func (a *Admin) Metrics() (map[string]float64, error) {
	body, err := a.Get("/metrics")
	if err != nil {
		return nil, err
	}
	return runlog.ParseMetrics(bytes.NewReader(body))
}

// Fetch GETs path into file, waiting at most timeout (a CPU profile takes
// its seconds).
func (a *Admin) Fetch(ctx context.Context, path, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", a.URL+path, resp.Status, bytes.TrimSpace(body))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("GET %s: %w", a.URL+path, err)
	}
	return f.Close()
}
