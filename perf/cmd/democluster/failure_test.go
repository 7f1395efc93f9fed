//go:build linux

package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/proto"
)

// The failure tests run a cluster of 3 gateways of the real server binary
// (-sets 6: user u runs on gateway u mod 3) with the load client against
// gateway 0, and break it mid-run: a gateway killed and restarted, NATS
// stopped and started again.
const (
	failGateways = 3
	failSets     = 6
	failUsers    = 300
	failQPS      = 600
	failRamp     = 2 * time.Second
	failLoad     = 7 * time.Second
	// failAt is when, into the load, a test breaks the cluster.
	failAt    = 2 * time.Second
	failBound = time.Second // -cluster-timeout
	// answerSlack is what an "unavailable" answer may take beyond the
	// bound: the sweeper's tick (bound/20), the rings, a loaded machine.
	answerSlack = 1500 * time.Millisecond
	probeUser   = 100_000 // probes: users 100,000 + k, outside the load client's
)

// gatewayOf is the gateway of user u in the failure tests' cluster.
func gatewayOf(u uint32) int { return int(u) % failSets % failGateways }

// The binaries, built once for the test binary by bins.
var (
	binsOnce         sync.Once
	binDir           string
	binErr           error
	serverBin, lcBin string
)

// TestMain removes the binaries bins built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bins builds the server (under the race detector when the tests run under
// it) and the load client, once per test binary.
func bins(t *testing.T) (server, client string) {
	t.Helper()
	binsOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "democluster-test-"); binErr != nil {
			return
		}
		serverBin, lcBin, binErr = harness.BuildBinaries("../../..", binDir, raceEnabled)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return serverBin, lcBin
}

// failRun is a cluster under the load client.
type failRun struct {
	t      *testing.T
	ctx    context.Context
	cl     *harness.Cluster
	client *harness.Client
	dir    string
}

func startFailRun(t *testing.T) *failRun {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a cluster of server binaries under the load client for ~15 s")
	}
	srvBin, clientBin := bins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	ids, ns, stopNATS, err := (&harness.Run{Name: "democluster-test", Dir: dir}).StartGatewaysNATS(ctx, filepath.Join(binDir, "nats-server"), 1,
		jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: failSets, Gateways: failGateways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopNATS)
	cl := &harness.Cluster{Bin: srvBin, Sets: failSets, Timeout: failBound.String(), Extra: []string{"-loops", "1", "-ring", "1024"}, Dir: dir,
		NATS: ns, Auth: harness.IdentityArgs(ids)}
	t.Cleanup(func() {
		cl.Cleanup()
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), tail(b, 3000))
			}
		}
	})
	if err := cl.Start(ctx, failGateways); err != nil {
		t.Fatal(err)
	}
	r := &failRun{t: t, ctx: ctx, cl: cl, dir: dir}
	client, err := harness.StartClient(ctx, cl.Gateways[0].Srv, harness.ClientConfig{
		Bin: clientBin, Dir: dir, Users: harness.Users(failUsers), Aligned: true,
		Phases: fmt.Sprintf("0@%s,%d@%s", failRamp, failQPS, failLoad),
		Flags: []string{"-duration", (failRamp + failLoad).String(), "-send-rate", "40", "-send-recipients", "3",
			"-chat-rate", "40", "-timeout", "8s", "-grace", "5s", "-quiet", "-loops", "1"},
		Source: "127.0.0.2-127.0.0.4", Grace: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.client = client
	if _, err := harness.WaitLogins(ctx, cl.Logins, failUsers, time.Now().Add(failRamp+10*time.Second), client); err != nil {
		t.Fatal(err)
	}
	// A shake campaign POSTed on gateway 1, dealt by parts on all three,
	// and lasting past the load: a restarted gateway resumes its part.
	if _, err := cl.Admin(1).StartCampaign("shake", url.Values{"rate": {"300"}, "total": {"2700"}, "min": {"1"}, "max": {"200"}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// wait waits for the load client to end and returns its report.
func (r *failRun) wait() *loadclient.Report {
	r.t.Helper()
	if err := r.client.Wait(); err != nil {
		r.t.Logf("loadclient: %v (expected: it counts the failures it met)", err)
	}
	rep, err := r.client.ReadReport()
	if err != nil {
		r.t.Fatal(err)
	}
	return rep
}

// probe logs in probe user k at gateway gw.
func (r *failRun) probe(k int, gw int) *wire.Conn {
	r.t.Helper()
	for u := uint32(probeUser + k); ; u++ {
		if gatewayOf(u) == gw {
			c, err := wire.DialLogin(r.cl.Gateways[gw].Srv.Listen, u)
			if err != nil {
				r.t.Fatal(err)
			}
			r.t.Cleanup(func() { c.Close() })
			return c
		}
	}
}

// chat sends a CHAT from c to user and returns CHAT_ACK's status.
func chat(t *testing.T, c *wire.Conn, stamp uint64, to uint32) uint8 {
	t.Helper()
	c.Write(proto.AppendChat(nil, stamp, to, []byte("probe")))
	for {
		f, err := c.Await(proto.ChatAck, 10*time.Second)
		if err != nil {
			t.Fatalf("CHAT to %d: no CHAT_ACK: %v", to, err)
		}
		if f.Stamp == stamp {
			st, _ := f.ChatAck()
			return st
		}
	}
}

// openForeign OPENs, from c, an envelope id of set that was never handed
// out (no money either way) and returns OPEN_RESULT's status.
func openForeign(t *testing.T, c *wire.Conn, set int, stamp uint64) uint8 {
	t.Helper()
	gen, err := envelope.NewGroupIDGen(set, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	c.Write(proto.AppendOpen(nil, stamp, gen.Next()))
	f, err := c.Await(proto.OpenResult, 10*time.Second)
	if err != nil {
		t.Fatalf("OPEN of an envelope of SET %d: no OPEN_RESULT: %v", set, err)
	}
	st, _, _ := f.OpenResult()
	return st
}

// wantAnswer runs ask and fails t unless it answers status want within d.
func wantAnswer(t *testing.T, what string, want uint8, d time.Duration, ask func() uint8) {
	t.Helper()
	start := time.Now()
	st := ask()
	took := time.Since(start)
	if st != want || took > d {
		t.Errorf("%s: status %d after %v; want %d within %v", what, st, took, want, d)
		return
	}
	t.Logf("%s: status %d after %v", what, st, took.Round(time.Millisecond))
}

// goroutines reads go_goroutines of every running gateway.
func (r *failRun) goroutines() []float64 {
	var out []float64
	for _, g := range r.cl.Gateways {
		v := -1.0
		if g.Srv != nil {
			if x, err := harness.ReadCrossings(g.Srv.Admin); err == nil {
				v = x.Goroutines
			}
		}
		out = append(out, v)
	}
	return out
}

// ledgers checks every gateway's two invariants exactly, once the
// campaigns are done, and returns /cluster/stats.
func (r *failRun) ledgers() harness.ClusterStats {
	r.t.Helper()
	for _, g := range r.cl.Gateways {
		if err := g.Srv.Admin.WaitCampaigns(30 * time.Second); err != nil {
			r.t.Errorf("gateway %d: %v", g.Node, err)
		}
		l, err := g.Srv.Admin.SettledLedger(2*time.Second, ledgerChecks)
		if err != nil {
			r.t.Fatal(err)
		}
		checks := l.Checks
		for _, c := range checks {
			r.t.Logf("gateway %d: %s", g.Node, c)
		}
		for _, b := range harness.FailedChecks(checks) {
			r.t.Errorf("gateway %d: %s", g.Node, b)
		}
	}
	cs, err := harness.ReadClusterStats(r.cl.Admin(0))
	if err != nil {
		r.t.Fatal(err)
	}
	if cs.Gateways != failGateways || len(cs.Missing) > 0 {
		r.t.Errorf("/cluster/stats: %d gateways answered, missing %v", cs.Gateways, cs.Missing)
	}
	return cs
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestGatewayKilled: gateway 2 gets SIGKILL mid-run. The survivors keep
// answering their own users; OPENs and CHATs that need gateway 2 answer
// unavailable within the bound; the survivors' goroutines stay bounded.
// Restarted on the same -data, gateway 2 rejoins, every gateway's ledger
// balances exactly, and every fen a client was told of is counted.
func TestGatewayKilled(t *testing.T) {
	r := startFailRun(t)
	local, remote := r.probe(0, 0), r.probe(1, 1)
	time.Sleep(time.Until(r.client.Start.Add(failRamp + failAt))) // the load under way
	before := r.goroutines()
	r.cl.Kill(2)
	killed := time.Now()
	t.Logf("gateway 2 killed at +%.1fs of the load client's run; goroutines before %v", killed.Sub(r.client.Start).Seconds(), before)

	// Own users answered, crossings to gateway 2 unavailable within the bound.
	dead := uint32(probeUser + 2)
	for gatewayOf(dead) != 2 {
		dead++
	}
	wantAnswer(t, "CHAT from gateway 0 to a user of gateway 1 with gateway 2 down", proto.ChatHanded, failBound, func() uint8 { return chat(t, local, 1, remote.User) })
	wantAnswer(t, "CHAT to a user of the dead gateway", proto.ChatOverloaded, failBound+answerSlack, func() uint8 { return chat(t, local, 2, dead) })
	wantAnswer(t, "OPEN of an envelope of the dead gateway's SET", proto.OpenOverloaded, failBound+answerSlack, func() uint8 { return openForeign(t, local, 2, 3) })
	// The survivors' goroutines while it is down.
	var peak []float64
	for time.Since(killed) < 2*time.Second {
		g := r.goroutines()
		for i, v := range g {
			if len(peak) <= i {
				peak = append(peak, v)
			}
			peak[i] = max(peak[i], v)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for i := range 2 {
		if peak[i] > before[i]+50 {
			t.Errorf("gateway %d: %v goroutines while gateway 2 was down, %v before", i, peak[i], before[i])
		}
	}
	t.Logf("survivors' goroutines: peak %v while gateway 2 was down", peak[:2])

	if err := r.cl.Restart(r.ctx, 2); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := r.cl.WaitUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway 2 restarted on its -data %v after the kill; every gateway sees all up %v after the restart",
		restarted.Sub(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	if st := chat(t, local, 4, dead); st == proto.ChatOverloaded {
		t.Errorf("CHAT to a user of the restarted gateway: status %d", st)
	}

	rep := r.wait()
	for _, g := range r.cl.Gateways[:2] {
		if _, err := g.Srv.Admin.WaitConnections(1, false, 15*time.Second); err != nil { // the probe
			t.Errorf("gateway %d after the load: %v", g.Node, err)
		}
	}
	after := r.goroutines()
	for i := range 2 {
		if after[i] > before[i]+20 {
			t.Errorf("gateway %d: %v goroutines after the run, %v before the kill", i, after[i], before[i])
		}
	}
	open, chats := rep.Requests["OPEN"], rep.Requests["CHAT"]
	t.Logf("load client: %d redirected, errors %v; OPEN status %v, CHAT status %v; goroutines after %v",
		rep.Redirected, rep.Errors, open.Status, chats.Status, after)
	if rep.Errors["timeout"] != 0 {
		t.Errorf("the load client timed out %d times: a request hung", rep.Errors["timeout"])
	}
	cs := r.ledgers()
	if uint64(cs.Shake.GotAmount) < rep.ShakeAmount || uint64(cs.Envelopes.OpenedAmount) < rep.OpenAmount {
		t.Errorf("the clients were told of %d fen shaken and %d opened; the cluster counts %d and %d",
			rep.ShakeAmount, rep.OpenAmount, cs.Shake.GotAmount, cs.Envelopes.OpenedAmount)
	}
	t.Logf("told ≤ counted: shaken %d ≤ %d fen, opened %d ≤ %d fen", rep.ShakeAmount, cs.Shake.GotAmount, rep.OpenAmount, cs.Envelopes.OpenedAmount)
}

// TestNATSRestarted: NATS stops mid-run and starts again on its port ~2 s
// later. The gateways keep serving their own SETs, crossings answer
// unavailable meanwhile, everything resumes, and after the run the
// cluster reconciles exactly with what the clients were told.
func TestNATSRestarted(t *testing.T) {
	r := startFailRun(t)
	local, remote := r.probe(0, 0), r.probe(1, 1)
	neighbour := r.probe(3, 0)
	time.Sleep(time.Until(r.client.Start.Add(failRamp + failAt))) // the load under way
	r.cl.StopNATS()
	stopped := time.Now()
	t.Logf("NATS stopped at +%.1fs of the load client's run", stopped.Sub(r.client.Start).Seconds())
	wantAnswer(t, "CHAT within gateway 0 with NATS down", proto.ChatHanded, failBound, func() uint8 { return chat(t, local, 1, neighbour.User) })
	wantAnswer(t, "CHAT across gateways with NATS down", proto.ChatOverloaded, failBound+answerSlack, func() uint8 { return chat(t, local, 2, remote.User) })
	wantAnswer(t, "OPEN across gateways with NATS down", proto.OpenOverloaded, failBound+answerSlack, func() uint8 { return openForeign(t, local, 1, 3) })
	time.Sleep(time.Until(stopped.Add(2 * time.Second)))
	if err := r.cl.StartNATS(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if err := r.cl.WaitUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	up := time.Since(back)
	var resumed time.Duration
	for stamp := uint64(10); ; stamp++ {
		st := chat(t, local, stamp, remote.User)
		if st == proto.ChatHanded {
			resumed = time.Since(back)
			break
		}
		if time.Since(back) > 10*time.Second {
			t.Fatalf("crossings not answered 10 s after NATS came back: CHAT_ACK %d", st)
		}
	}
	t.Logf("NATS down %v; after it came back: every gateway sees all up in %v, a crossing answered in %v",
		back.Sub(stopped).Round(time.Millisecond), up.Round(time.Millisecond), resumed.Round(time.Millisecond))

	rep := r.wait()
	open, chats := rep.Requests["OPEN"], rep.Requests["CHAT"]
	t.Logf("load client: errors %v; OPEN status %v, CHAT status %v", rep.Errors, open.Status, chats.Status)
	for _, k := range []string{"connect", "reset", "timeout", "protocol"} {
		if rep.Errors[k] != 0 {
			t.Errorf("load client: %d %s errors", rep.Errors[k], k)
		}
	}
	cs := r.ledgers()
	// The strict reconciliation: every figure the server keeps agrees with
	// the clients'; every ENVELOPE pushed was OPENed, answered ok or, while
	// NATS was down, unavailable (not carried out, so not counted as owed).
	if rep.Reconcile == nil || rep.Reconcile.Err != "" {
		t.Fatalf("load client's reconciliation: %+v", rep.Reconcile)
	}
	for _, c := range rep.Reconcile.Checks {
		if c.Diff != 0 {
			t.Errorf("reconcile %s: want %d, got %d (%s)", c.Figure, c.Want, c.Got, c.Note)
		}
		t.Logf("reconcile %s: want %d got %d (%s)", c.Figure, c.Want, c.Got, c.Note)
	}
	if uint64(cs.Shake.GotAmount) != rep.ShakeAmount || uint64(cs.Envelopes.OpenedAmount) != rep.OpenAmount {
		t.Errorf("cluster: %d fen shaken, %d opened; the clients were told %d and %d",
			cs.Shake.GotAmount, cs.Envelopes.OpenedAmount, rep.ShakeAmount, rep.OpenAmount)
	}
	var timedOut, late float64
	for _, g := range r.cl.Gateways {
		x, _ := harness.ReadCrossings(g.Srv.Admin)
		timedOut += x.TimedOut
		late += x.Late
	}
	t.Logf("crossings timed out %v, late answers %v; OPENs unavailable %d, CHATs unavailable %d", timedOut, late, open.Status["5"], chats.Status["2"])
}
