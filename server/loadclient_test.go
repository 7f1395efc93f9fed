package server_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/server"
)

// These tests drive an in-process server with the load client, as
// `make demo` does with two processes.

// runLoad parses args as the load client's command line, runs it and fails
// the test if it takes longer than limit.
func runLoad(t *testing.T, limit time.Duration, args ...string) (*loadclient.Report, error, time.Duration, string) {
	t.Helper()
	cfg, err := loadclient.ParseFlags(flag.NewFlagSet("loadclient", flag.ContinueOnError), args)
	if err != nil {
		t.Fatalf("loadclient.ParseFlags %q: %v", args, err)
	}
	var out strings.Builder
	type result struct {
		r   *loadclient.Report
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := loadclient.Run(context.Background(), cfg, &out)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err, time.Since(start), out.String()
	case <-time.After(limit):
		t.Fatalf("loadclient.Run still running after %v", limit)
		return nil, nil, 0, ""
	}
}

func TestLoadClientReconciles(t *testing.T) {
	t.Parallel() // its load is paced by the clock, well under what the server serves
	ts := startServer(t, func(o *server.Options) { o.Ring = 256 })
	const users = 1000
	// The campaigns start once every user is online, so that the send
	// campaign finds its recipients, and end before the run does, so that
	// every envelope is pushed and opened before the client drains.
	started := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(waitTime)
		for ts.Stats().Logins < users {
			if time.Now().After(deadline) {
				started <- fmt.Errorf("%d users logged in after %v; want %d", ts.Stats().Logins, waitTime, users)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, q := range []string{"shake?rate=200&total=400&min=1&max=1000", "send?rate=50&total=100&recipients=3&min=3&max=5000"} {
			resp, err := ts.hc.Post(ts.admin+"/campaigns/"+q, "", nil)
			if err != nil {
				started <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				started <- fmt.Errorf("POST /campaigns/%s: %s", q, resp.Status)
				return
			}
		}
		started <- nil
	}()
	r, err, took, out := runLoad(t, 30*time.Second, "-server", ts.addr, "-admin", ts.admin, "-users", "1-1000",
		"-qps", "1000", "-duration", "4s", "-loops", "2", "-send-rate", "10", "-send-recipients", "3",
		"-chat-rate", "10", "-grace", "5s", "-quiet")
	t.Logf("run took %v:\n%s", took, out)
	if err := <-started; err != nil {
		t.Fatalf("starting the campaigns: %v", err)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Reconcile == nil || !r.Reconcile.OK {
		t.Fatalf("reconcile: %+v; want ok", r.Reconcile)
	}
	for _, kind := range []string{"connect", "reset", "timeout", "protocol"} {
		if n := r.Errors[kind]; n != 0 {
			t.Errorf("%d %s errors; want none", n, kind)
		}
	}
	if n := r.Errors["overload"]; n != 0 {
		t.Logf("%d requests answered overloaded (a status, not a failure)", n)
	}
	shake := r.Requests["SHAKE"]
	if shake.Sent == 0 || shake.Answered != shake.Sent || shake.Status["1"] == 0 {
		t.Errorf("SHAKE %+v; want every one answered and some envelopes got", shake)
	}
	if r.Users != users || r.Pushes["ENVELOPE"] == 0 {
		t.Errorf("%d users, %d ENVELOPE pushes; want %d users and pushes from the send campaign and the SENDs",
			r.Users, r.Pushes["ENVELOPE"], users)
	}
	cs := ts.campaigns()
	if len(cs) != 2 || !cs[0].Done || !cs[1].Done {
		t.Fatalf("campaigns %+v; want both done within the run", cs)
	}
	st := ts.stats()
	if st.Shake.CreatedAmount != cs[0].Amount {
		t.Errorf("shake.created_amount %d; want the campaign's %d", st.Shake.CreatedAmount, cs[0].Amount)
	}
	checkShakeLedger(t, st)
	checkEnvelopeLedger(t, st)
}

// TestLoadClientRunsAgain runs the load client three times on one -data: twice against one
// server, then against a restart of it. Each run must reconcile strictly, and exactly, with
// the change of the server's figures over it, though the server holds the earlier runs' money.
func TestLoadClientRunsAgain(t *testing.T) {
	t.Parallel() // its load is paced by the clock, well under what the server serves
	data := t.TempDir()
	edit := func(o *server.Options) { o.Data, o.Ring = data, 256 }
	a := startServer(t, edit)
	a.waitCampaign(a.startCampaign("shake", "rate=100000&total=3000&min=1&max=100").ID)
	var last *loadclient.Figures
	run := func(name string, ts *testServer) {
		t.Helper()
		r, err, took, out := runLoad(t, 30*time.Second, "-server", ts.addr, "-admin", ts.admin, "-users", "1-100",
			"-qps", "200", "-duration", "2s", "-loops", "2", "-send-rate", "10", "-send-recipients", "3", "-grace", "5s", "-quiet")
		t.Logf("%s took %v:\n%s", name, took, out)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rec := r.Reconcile
		if rec == nil || !rec.OK || rec.Baseline == nil || rec.After == nil {
			t.Fatalf("%s: reconcile %+v; want ok, with the baseline and the figures after", name, rec)
		}
		if r.ShakeAmount == 0 || r.OpenAmount == 0 {
			t.Errorf("%s: got %d SHAKE fen and %d OPEN fen; want some of each", name, r.ShakeAmount, r.OpenAmount)
		}
		if last != nil && (!reflect.DeepEqual(rec.Baseline, last) || rec.Baseline.GotAmount == 0) {
			t.Errorf("%s: baseline %+v; want the figures after the run before, %+v", name, *rec.Baseline, *last)
		}
		last = rec.After
	}
	run("first run", a)
	run("second run", a)
	if err := a.shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	run("a run after the restart", startServer(t, edit))
}

// TestLoadClientCampaignOutlastsRun ends a run while a send campaign is still pushing. The
// client stops opening at the end, so that its money and the server's stop together: the
// strict reconciliation is exact, and done before the grace runs out.
func TestLoadClientCampaignOutlastsRun(t *testing.T) {
	t.Parallel() // its load is paced by the clock, well under what the server serves
	ts := startServer(t, func(o *server.Options) { o.Ring = 256 })
	const users = 200
	started := make(chan error, 1)
	go func() { // once every user is online, so that the campaign finds recipients
		deadline := time.Now().Add(waitTime)
		for ts.Stats().Logins < users {
			if time.Now().After(deadline) {
				started <- fmt.Errorf("%d users logged in after %v; want %d", ts.Stats().Logins, waitTime, users)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		q := "send?rate=300&total=1000000&recipients=3&min=3&max=2000"
		resp, err := ts.hc.Post(ts.admin+"/campaigns/"+q, "", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("POST /campaigns/%s: %s", q, resp.Status)
			}
		}
		started <- err
	}()
	r, err, took, out := runLoad(t, 30*time.Second, "-server", ts.addr, "-admin", ts.admin, "-users", "1-200",
		"-qps", "200", "-duration", "3s", "-loops", "2", "-grace", "3s", "-quiet")
	t.Logf("run took %v:\n%s", took, out)
	if err := <-started; err != nil {
		t.Fatalf("starting the campaign: %v", err)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rec := r.Reconcile; rec == nil || !rec.OK || len(rec.InFlight) != 0 {
		t.Fatalf("reconcile %+v; want ok, nothing in flight", rec)
	}
	if r.OpenAmount == 0 || r.Unopened == 0 {
		t.Errorf("%d OPEN fen, %d pushes not opened; want the campaign's pushes opened during the run and coming after it", r.OpenAmount, r.Unopened)
	}
	if cs := ts.campaigns(); len(cs) != 1 || cs[0].Done {
		t.Errorf("campaigns %+v; want the send campaign still running after the run", cs)
	}
}

func TestLoadClientServerShutdownMidRun(t *testing.T) {
	t.Parallel() // its load is paced by the clock, well under what the server serves
	ts := startServer(t, nil)
	time.AfterFunc(1500*time.Millisecond, func() { ts.shutdown() })
	r, err, took, out := runLoad(t, 30*time.Second, "-server", ts.addr, "-admin", ts.admin, "-users", "1-200",
		"-qps", "500", "-duration", "3s", "-loops", "2", "-grace", "1s", "-timeout", "1s", "-quiet")
	t.Logf("run took %v:\n%s", took, out)
	if err == nil {
		t.Fatal("Run: no error; want one for the server that went away")
	}
	if took > 12*time.Second {
		t.Errorf("Run took %v after a 3s run with a 1s grace; want it bounded", took)
	}
	if r == nil {
		t.Fatalf("Run: %v and no report; want the report of the failed run", err)
	}
	if r.Errors["connect"]+r.Errors["reset"]+r.Errors["protocol"] == 0 {
		t.Errorf("errors %v; want the shutdown counted", r.Errors)
	}
	if err := ts.shutdown(); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
