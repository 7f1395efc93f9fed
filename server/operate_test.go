package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/campaign"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// These tests are of what keeps the server operable: bounded campaigns,
// their cancellation, /healthz and the admin token's sources.

// endless is a campaign's total that no test outlives.
const endless = "total=4294967296"

// campaignStatus finds campaign id in GET /campaigns.
func (ts *testServer) campaignStatus(id int) campaign.Status {
	ts.t.Helper()
	for _, c := range ts.campaigns() {
		if c.ID == id {
			return c
		}
	}
	ts.t.Fatalf("campaign %d not in GET /campaigns", id)
	return campaign.Status{}
}

// settled waits until the SETs have taken in every shake envelope dealt so
// far, and returns /stats then.
func (ts *testServer) settled(dealt uint64) server.Stats {
	ts.t.Helper()
	var st server.Stats
	waitFor(ts.t, fmt.Sprintf("the pools to take in %d envelopes", dealt), func() bool {
		st = ts.stats()
		return st.Shake.Created == dealt
	})
	return st
}

func TestCampaignCap(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.MaxCampaigns = 2 })
	a := ts.startCampaign("shake", "rate=1&"+endless+"&min=1&max=1")
	ts.startCampaign("send", "rate=1&"+endless+"&recipients=1&min=1&max=1")
	code, body := ts.do(http.MethodPost, "/campaigns/shake?rate=1&total=10&min=1&max=1", "")
	var refusal struct {
		Error        string `json:"error"`
		MaxCampaigns int    `json:"max_campaigns"`
	}
	json.Unmarshal(body, &refusal)
	if code != http.StatusTooManyRequests || refusal.MaxCampaigns != 2 || !strings.Contains(refusal.Error, "-max-campaigns=2") {
		t.Fatalf("a third campaign: %d %s; want 429 naming -max-campaigns=2", code, body)
	}
	if code, body := ts.do(http.MethodDelete, fmt.Sprintf("/campaigns/%d", a.ID), ""); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	ts.startCampaign("shake", "rate=1&total=10&min=1&max=1") // room again
}

// TestCampaignCancel: DELETE stops the dealing, what was dealt stays in the
// ledger, exactly.
func TestCampaignCancel(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := login(t, ts, 1)
	camp := ts.startCampaign("shake", "rate=2000&"+endless+"&min=1&max=100")
	waitFor(t, "100 envelopes dealt", func() bool { return ts.campaignStatus(camp.ID).Dealt >= 100 })
	got := 0
	for range 20 {
		s := c.nextStamp()
		c.send(proto.AppendShake(nil, s))
		if status, _, _ := c.expect(proto.ShakeResult, s).ShakeResult(); status == proto.ShakeGot {
			got++
		}
	}

	path := fmt.Sprintf("/campaigns/%d", camp.ID)
	code, body := ts.do(http.MethodDelete, path, "")
	var st campaign.Status
	if err := json.Unmarshal(body, &st); err != nil || code != http.StatusOK || st.State != campaign.Cancelled || !st.Done || st.Ended.IsZero() {
		t.Fatalf("DELETE %s: %d %s; want 200 and the status, cancelled", path, code, body)
	}
	time.Sleep(100 * time.Millisecond) // ten of the runner's ticks
	if now := ts.campaignStatus(camp.ID); now.Dealt != st.Dealt || now.Amount != st.Amount || now.State != campaign.Cancelled {
		t.Errorf("after the cancel: %+v; want it as cancelled: %+v", now, st)
	}
	ledger := ts.settled(st.Dealt)
	checkShakeLedger(t, ledger)
	if ledger.Shake.CreatedAmount != st.Amount || ledger.Shake.Got != uint64(got) {
		t.Errorf("shake ledger %+v; want created_amount %d (the campaign's), got %d", ledger.Shake, st.Amount, got)
	}
	if code, body := ts.do(http.MethodDelete, path, ""); code != http.StatusOK || !strings.Contains(string(body), `"cancelled"`) {
		t.Errorf("DELETE again: %d %s; want 200, cancelled", code, body)
	}

	short := ts.startCampaign("shake", "rate=1000&total=5&min=1&max=1")
	ts.waitCampaign(short.ID)
	for _, tc := range []struct {
		path string
		code int
		in   string
	}{
		{fmt.Sprintf("/campaigns/%d", short.ID), http.StatusConflict, "already finished"},
		{"/campaigns/999", http.StatusNotFound, "no campaign 999"},
		{"/campaigns/x", http.StatusBadRequest, `id=\"x\"`},
	} {
		if code, body := ts.do(http.MethodDelete, tc.path, ""); code != tc.code || !strings.Contains(string(body), tc.in) {
			t.Errorf("DELETE %s: %d %s; want %d with %q", tc.path, code, body, tc.code, tc.in)
		}
	}
}

// TestCampaignPoolBudget floods: a campaign of 2^32 envelopes at 10^6 a
// second over a pool budget of 500. The pools never hold more than the
// budget (exactly: no answer is given back here), the campaign says it
// waits, deals again as SHAKEs take from the pools, and the ledger stays
// exact.
func TestCampaignPoolBudget(t *testing.T) {
	t.Parallel()
	const maxPool = 500
	ts := startServer(t, func(o *server.Options) { o.MaxPool = maxPool })
	camp := ts.startCampaign("shake", "rate=1000000&"+endless+"&min=1&max=100")
	end := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(end) {
		if pool := ts.stats().Shake.Pool; pool > maxPool {
			t.Fatalf("pool %d; want ≤ -max-pool %d", pool, maxPool)
		}
	}
	st := ts.campaignStatus(camp.ID)
	if st.Dealt != maxPool || st.Waiting != "pool full" {
		t.Fatalf("%+v; want %d dealt, waiting: pool full", st, maxPool)
	}

	c := login(t, ts, 1)
	got := uint64(0)
	for range 200 {
		s := c.nextStamp()
		c.send(proto.AppendShake(nil, s))
		if status, _, _ := c.expect(proto.ShakeResult, s).ShakeResult(); status == proto.ShakeGot {
			got++
		}
	}
	waitFor(t, "the pools refilled", func() bool { return ts.campaignStatus(camp.ID).Dealt == maxPool+got })
	time.Sleep(50 * time.Millisecond) // five ticks: nothing more may come
	if pool := ts.stats().Shake.Pool; pool > maxPool {
		t.Fatalf("pool %d after the refill; want ≤ %d", pool, maxPool)
	}
	code, body := ts.do(http.MethodDelete, fmt.Sprintf("/campaigns/%d", camp.ID), "")
	json.Unmarshal(body, &st)
	if code != http.StatusOK || st.Dealt != maxPool+got {
		t.Fatalf("DELETE: %d %s; want 200 with %d dealt (the budget and what SHAKEs took)", code, body, maxPool+got)
	}
	ledger := ts.settled(st.Dealt)
	checkShakeLedger(t, ledger)
	if ledger.Shake.Pool != maxPool || ledger.Shake.CreatedAmount != st.Amount {
		t.Errorf("shake ledger %+v; want a full pool (%d) and created_amount %d", ledger.Shake, maxPool, st.Amount)
	}
}

// TestCampaignRequestsKeepShakeFast: 2,000 campaign requests at once (most
// refused past -max-campaigns) leave SHAKE round trips fast.
func TestCampaignRequestsKeepShakeFast(t *testing.T) {
	ts := startServer(t, nil)
	c := login(t, ts, 1)
	ts.startCampaign("shake", "rate=1000&"+endless+"&min=1&max=10")
	p99 := func(stop func() bool) (time.Duration, int) {
		var rtts []time.Duration
		for len(rtts) < 300 || !stop() {
			s := c.nextStamp()
			t0 := time.Now()
			c.send(proto.AppendShake(nil, s))
			c.expect(proto.ShakeResult, s)
			rtts = append(rtts, time.Since(t0))
		}
		slices.Sort(rtts)
		return rtts[len(rtts)*99/100], len(rtts)
	}
	base, _ := p99(func() bool { return true })

	const requests, workers = 2000, 16
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	next := make(chan int, requests)
	for i := range requests {
		next <- i
	}
	close(next)
	done := make(chan struct{})
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				code := 0
				resp, err := ts.hc.Post(ts.admin+"/campaigns/shake?rate=100&"+endless+"&min=1&max=10", "", nil)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	during, n := p99(func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	t.Logf("SHAKE p99 %v alone, %v over %d round trips while %d campaign requests arrived: %v", base, during, n, requests, codes)
	if codes[http.StatusOK] != server.DefaultMaxCampaigns-1 || codes[http.StatusTooManyRequests] != requests-server.DefaultMaxCampaigns+1 {
		t.Errorf("answers %v; want %d × 200 (up to -max-campaigns) and the rest 429", codes, server.DefaultMaxCampaigns-1)
	}
	if during > time.Second { // generous: the machine is shared
		t.Errorf("SHAKE p99 %v while campaigns arrived; want under 1 s", during)
	}
}

// TestHealthz: ok while serving, 503 with a reason once the shutdown began.
func TestHealthz(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	if code, body := ts.do(http.MethodGet, "/healthz", ""); code != http.StatusOK || !strings.Contains(string(body), `"status": "ok"`) {
		t.Fatalf("GET /healthz: %d %s; want 200 ok", code, body)
	}
	c := login(t, ts, 1) // stays connected: the shutdown waits for it
	stopped := make(chan error, 1)
	go func() { stopped <- ts.shutdown() }()
	waitFor(t, "/healthz to answer 503", func() bool {
		code, body := ts.do(http.MethodGet, "/healthz", "")
		if code == http.StatusServiceUnavailable && !strings.Contains(string(body), "shutting down") {
			t.Fatalf("GET /healthz: %d %s; want the reason", code, body)
		}
		return code == http.StatusServiceUnavailable
	})
	c.c.Close()
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestAdminTokenSources: the admin token from -admin-token-file or
// $HONGBAO_ADMIN_TOKEN guards every request; an empty file is refused.
func TestAdminTokenSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	check := func(name string, ts *testServer, token string) {
		t.Helper()
		if code, _ := ts.do(http.MethodGet, "/stats", ""); code != http.StatusUnauthorized {
			t.Errorf("%s: GET /stats without the token: %d; want 401", name, code)
		}
		if code, _ := ts.do(http.MethodGet, "/stats", "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s: GET /stats with a wrong token: %d; want 401", name, code)
		}
		if code, body := ts.do(http.MethodGet, "/stats", token); code != http.StatusOK {
			t.Errorf("%s: GET /stats with the token: %d %s; want 200", name, code, body)
		}
	}
	check("-admin-token-file", startServer(t, func(o *server.Options) { o.AdminTokenFile = file }), "from-file")
	t.Setenv(server.AdminTokenEnv, "from-env")
	check("$"+server.AdminTokenEnv, startServer(t, nil), "from-env")

	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", AdminTokenFile: empty, Data: t.TempDir()}
	o.Fill()
	if s, err := server.New(o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), empty) {
		if s != nil {
			s.Shutdown(t.Context())
		}
		t.Errorf("New with an empty -admin-token-file: %v; want an error naming the file", err)
	}
}
