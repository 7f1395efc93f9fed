package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/campaign"
	hbclient "github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/jsjournal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// startReplicated starts gateway node of a replicated cluster of up to
// nodes gateways over the JetStream server ns. It does not rebalance by
// itself (-rebalance) unless edit says so: the tests place the SETs.
func startReplicated(t *testing.T, ns *embednats.Server, node, nodes, sets int, edit func(o *server.Options)) *testServer {
	t.Helper()
	provisionJS(t, ns, sets, nodes)
	return startServer(t, func(o *server.Options) {
		o.Sets, o.NATS, o.Node = sets, ns.URL(), fmt.Sprintf("%d/%d", node, nodes)
		o.Journal, o.Replicas, o.Lease, o.Rebalance = "jetstream", 1, time.Second, -1
		o.ClusterTimeout = 500 * time.Millisecond
		if edit != nil {
			edit(o)
		}
	})
}

// provisionJS makes ns's JetStream hold a cluster of sets SETs and nodes
// gateways, as the operator would before the first gateway starts (jsadmin
// provision); a layout already there is left as it is.
func provisionJS(t testing.TB, ns *embednats.Server, sets, nodes int) {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := jsjournal.Provision(ctx, js, jsjournal.Layout{Prefix: jsjournal.DefaultPrefix, Sets: sets, Gateways: nodes, Replicas: 1}, false); err != nil && !errors.Is(err, jsjournal.ErrLayout) {
		t.Fatal(err)
	}
}

// dealtOwner starts gateway 0 of nodes, running every one of sets SETs,
// deals a shake campaign of 20,000 envelopes into them and returns it once
// the SETs hold every envelope, with the amount dealt.
func dealtOwner(t *testing.T, ns *embednats.Server, nodes, sets int) (*testServer, uint64) {
	t.Helper()
	a := startReplicated(t, ns, 0, nodes, sets, nil)
	waitFor(t, "gateway 0 to run every SET", func() bool { return metric(t, a, "hongbao_cluster_sets_running") == uint64(sets) })
	c := a.startCampaign("shake", "rate=100000&total=20000&min=1&max=100")
	a.waitCampaign(c.ID)
	// Done counts the envelopes handed to the rings; the ledger has them
	// once the SETs applied them.
	waitFor(t, "the SETs to hold every envelope dealt", func() bool { return a.stats().Shake.Created == 20000 })
	return a, a.stats().Shake.CreatedAmount
}

// ownerAndSecond starts gateway 0 of two, running every one of sets SETs,
// then gateway 1, which runs none.
func ownerAndSecond(t *testing.T, sets int) (*testServer, *testServer) {
	t.Helper()
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a := startReplicated(t, ns, 0, 2, sets, nil)
	waitFor(t, "gateway 0 to run every SET", func() bool { return metric(t, a, "hongbao_cluster_sets_running") == uint64(sets) })
	return a, startReplicated(t, ns, 1, 2, sets, nil)
}

// runs returns the SETs each gateway runs by GET /cluster of g.
func runs(t *testing.T, g *testServer) map[int][]int {
	t.Helper()
	var m struct {
		Gateways []struct {
			Node int   `json:"node"`
			Sets []int `json:"sets"`
		} `json:"gateways"`
	}
	g.getJSON("/cluster", &m)
	out := map[int][]int{}
	for _, gw := range m.Gateways {
		out[gw.Node] = gw.Sets
	}
	return out
}

// TestReplicatedClaims: two gateways started together over one JetStream
// server share the SETs, each run by exactly one of them; a LOGIN at the
// other is sent to its owner; a gateway of another -sets is refused.
func TestReplicatedClaims(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	const sets = 4
	ns := embednats.StartTestJetStream(t, t.TempDir())
	// Started together they share at once if each hears the other within
	// the first's wait to join (placement.JoinWait); a start slower than
	// that under load is evened out by the rebalance.
	even := func(o *server.Options) { o.Rebalance = 50 * time.Millisecond }
	a := startReplicated(t, ns, 0, 2, sets, even)
	b := startReplicated(t, ns, 1, 2, sets, even)
	var m map[int][]int
	waitFor(t, "two SETs run by each gateway", func() bool {
		m = runs(t, a)
		return len(m[0]) == 2 && len(m[1]) == 2 &&
			metric(t, a, "hongbao_cluster_sets_running") == 2 && metric(t, b, "hongbao_cluster_sets_running") == 2
	})
	for _, set := range m[0] {
		user := uint32(set)
		if user == 0 {
			user = sets
		}
		login(t, a, user) // its owner serves it
		c := dial(t, b)
		s := c.nextStamp()
		c.send(proto.AppendLogin(nil, s, user, nil))
		f := c.expect(proto.LoginAck, s)
		if st, _ := f.LoginAck(); st != proto.LoginWrongGateway {
			t.Fatalf("LOGIN of user %d (SET %d, gateway 0's) at gateway 1: status %d; want %d (redirect)", user, set, st, proto.LoginWrongGateway)
		}
	}
	o := server.Options{Listen: "127.0.0.1:0", Admin: "off", Sets: sets + 1, Ring: 128, Loops: 1, NATS: ns.URL(), Node: "1/3",
		Journal: "jetstream", Replicas: 1, Ingress: *ingressMode, ClusterTimeout: 500 * time.Millisecond}
	o.Fill()
	if s, err := server.New(o, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "-sets") {
		if s != nil {
			s.Shutdown(t.Context())
		}
		t.Fatalf("a gateway of -sets %d in a cluster of %d: %v; want refused", sets+1, sets, err)
	}
}

// TestReplicatedFenced: the owner of every SET goes deaf to the cluster
// and idle (its heartbeats and appends stop, as when it is paused) while
// its clients shake. The other gateway takes every SET over; the old owner's next
// journal round is refused, so it tells no more money, sends its clients
// ERROR 9 and stops with a LostError. Every fen it told is in the new
// owner's ledger, which had followed the SETs as their standby, or, with
// -standby=false, loaded them from JetStream alone (a snapshot and the
// records after it); the pools are whole.
func TestReplicatedFenced(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	for _, standby := range []bool{true, false} {
		t.Run(fmt.Sprintf("standby=%v", standby), func(t *testing.T) {
			t.Parallel()
			testFenced(t, standby)
		})
	}
}

func testFenced(t *testing.T, standby bool) {
	const sets = 2
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a, _ := dealtOwner(t, ns, 2, sets)
	b := startReplicated(t, ns, 1, 2, sets, func(o *server.Options) { o.NoStandby = !standby })
	if standby {
		waitFor(t, "gateway 1 to follow every SET as a standby", func() bool { return metric(t, b, "hongbao_cluster_standbys") == sets })
	}
	before := a.stats()

	users := []*client{login(t, a, 1), login(t, a, 2)}
	var told, got uint64
	// Every SHAKE carries a request id; the one a user had in flight at the
	// fence is asked again at the new owner with it.
	sec, n := time.Now().Unix(), uint32(0)
	inFlight := map[*client]uint64{}
	// An application's client of user 3, given both gateways: it follows
	// the SET through the failover by itself.
	app, err := hbclient.Dial(t.Context(), []string{a.addr, b.addr}, hbclient.ReconnectWait(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.Login(t.Context(), 3, nil); err != nil || app.Addr() != a.addr {
		t.Fatalf("the app's login: %v at %s; want gateway 0 (%s)", err, app.Addr(), a.addr)
	}
	appShake := func() error {
		_, amount, err := app.Shake(t.Context())
		if err == nil {
			told, got = told+uint64(amount), got+1
		}
		return err
	}
	if err := appShake(); err != nil {
		t.Fatalf("the app's shake before the fault: %v", err)
	}
	// Shake until the first answer that is not money, deafening the owner
	// once a few fen are told.
	deaf := false
	answered, moved := map[*client]bool{}, map[*client]bool{}
	for round := 0; len(answered) < len(users) && round < 10_000; round++ {
		if round == 10 {
			// Without a standby the new owner then loads this snapshot and
			// the records after it; with one, it follows through the purge.
			if err := a.Snapshot(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
		}
		if round == 20 {
			// Deaf and idle, as a paused owner is: a gateway that goes on
			// appending is alive whatever its heartbeats.
			if err := a.LeaveCluster(); err != nil {
				t.Fatal(err)
			}
			deaf = true
			waitFor(t, "gateway 1 to take every SET over", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets })
		}
		for _, u := range users {
			if answered[u] {
				continue
			}
			s := u.nextStamp()
			n++
			id := proto.NewRequestID(sec, n)
			u.send(proto.AppendShakeID(nil, s, id))
			f, err := u.tryAnswer(s)
			if err != nil { // ERROR 9, or closed: this gateway no longer serves the user
				if !deaf {
					t.Fatalf("user %d before the fault: %v", u.user, err)
				}
				inFlight[u] = id
				if f.Type == proto.Error && f.ErrorCode() != proto.ErrCodeMoved {
					t.Fatalf("user %d: ERROR %d; want %d (moved)", u.user, f.ErrorCode(), proto.ErrCodeMoved)
				}
				answered[u], moved[u] = true, f.Type == proto.Error
				continue
			}
			st, _, amount := f.ShakeResult()
			switch st {
			case proto.ShakeGot:
				told += uint64(amount)
				got++
			case proto.ShakeNothing:
				if !deaf {
					t.Fatalf("the pool ran dry before the fault")
				}
			}
			if deaf && st != proto.ShakeGot {
				answered[u] = true
			}
		}
	}
	if !deaf || len(answered) < len(users) {
		t.Fatalf("the deaf owner kept answering money (%d of %d users stopped)", len(answered), len(users))
	}
	select {
	case <-a.Lost():
	case <-time.After(waitTime):
		t.Fatal("gateway 0 was not fenced")
	}
	waitFor(t, "gateway 1 to run every SET", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets })
	if err := a.shutdown(); !errors.As(err, new(*server.LostError)) {
		t.Fatalf("the fenced gateway's Shutdown: %v; want a LostError", err)
	}
	for _, u := range users { // sent away (fenced) before, or at the stop
		if !moved[u] {
			u.expectError(proto.ErrCodeMoved)
		}
	}
	// The app's client logs in again at gateway 1 by itself; its shake in
	// flight at the fence, if any, failed (ErrMoved, ErrConnLost).
	var appErr error
	for range 100 {
		if appErr = appShake(); appErr == nil {
			break
		}
		if !errors.Is(appErr, hbclient.ErrMoved) && !errors.Is(appErr, hbclient.ErrConnLost) {
			t.Fatalf("the app's shake after the failover: %v", appErr)
		}
	}
	if appErr != nil || app.Addr() != b.addr || app.Stats().Reconnects == 0 {
		t.Fatalf("the app after the failover: %v, at %s after %d reconnects; want money from gateway 1 (%s)", appErr, app.Addr(), app.Stats().Reconnects, b.addr)
	}
	var want uint64
	if standby {
		want = sets
	}
	if took := metric(t, b, "hongbao_cluster_standby_takeovers_total"); took != want {
		t.Errorf("%d takeovers from a standby; want %d", took, want)
	}
	// The SHAKEs the fence left unanswered, asked again with their ids.
	for u, id := range inFlight {
		c := login(t, b, u.user)
		s := c.nextStamp()
		c.send(proto.AppendShakeID(nil, s, id))
		if st, _, amount := c.answer(s).ShakeResult(); st == proto.ShakeGot {
			told, got = told+uint64(amount), got+1
		}
	}
	after := b.stats()
	if after.Shake.GotAmount != told || after.Shake.Got != got {
		t.Fatalf("told %d envelopes, %d fen; the new owner counts %d, %d fen; want exactly what was told", got, told, after.Shake.Got, after.Shake.GotAmount)
	}
	if after.Shake.GotAmount+after.Shake.PoolAmount != before.Shake.PoolAmount+before.Shake.GotAmount {
		t.Errorf("got %d + pool %d fen at the new owner; want the %d dealt", after.Shake.GotAmount, after.Shake.PoolAmount, before.Shake.PoolAmount+before.Shake.GotAmount)
	}
	checkShakeLedger(t, after)
}

// TestReplicatedLateHeartbeats: an owner whose heartbeats stop reaching
// the other gateway while it goes on appending to its SETs' journal
// (heartbeats late under load) is alive: nobody claims its SETs, and it
// fences nothing (it hears itself). Once it stops appending too, the other
// gateway takes them over, and it learns it lost them.
func TestReplicatedLateHeartbeats(t *testing.T) {
	t.Parallel() // it waits on leases, not on the CPU
	const sets = 2
	a, b := ownerAndSecond(t, sets)
	c := a.startCampaign("shake", "rate=100000&total=20000&min=1&max=100")
	a.waitCampaign(c.ID)
	users := []*client{login(t, a, 1), login(t, a, 2)}
	b.IgnoreGateway(0)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); { // three leases
		for _, u := range users {
			s := u.nextStamp()
			u.send(proto.AppendShake(nil, s))
			if f := u.answer(s); f.Type != proto.ShakeResult {
				t.Fatalf("user %d while its gateway appends: %s", u.user, describe(f))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := metric(t, b, "hongbao_cluster_sets_running"); n != 0 {
		t.Fatalf("gateway 1 took %v SETs of a gateway that went on appending", n)
	}
	if metric(t, b, "hongbao_cluster_claims_deferred_total") == 0 {
		t.Fatal("no claim deferred")
	}
	if n := metric(t, a, "hongbao_cluster_fences_total"); n != 0 {
		t.Fatal("the busy owner fenced itself")
	}
	waitFor(t, "gateway 1 to take every SET over once gateway 0 is idle", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets })
	select {
	case <-a.Lost():
	case <-time.After(waitTime):
		t.Fatal("gateway 0 did not learn it lost its SETs")
	}
}

// TestReplicatedMoneyCrossings: the money that crosses between gateways —
// ENVELOPE pushes and OPEN shares — survives the failover of the
// envelope's SET over core NATS, because a crossing leaves only once its
// record is acknowledged by JetStream: a push told before the fault names
// an envelope the new owner has; a share told before it is what the new
// owner answers a repeated OPEN with, never a second one; an OPEN the fault
// left without an answer is answered 5 and then served by the new owner;
// and the shares told add up to what the new owner counts opened, exactly.
func TestReplicatedMoneyCrossings(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	const sets = 2
	ns := embednats.StartTestJetStream(t, t.TempDir())
	gws := []*testServer{startReplicated(t, ns, 0, 2, sets, nil), startReplicated(t, ns, 1, 2, sets, nil)}
	waitFor(t, "every SET to be run by one gateway", func() bool {
		return metric(t, gws[0], "hongbao_cluster_sets_running")+metric(t, gws[1], "hongbao_cluster_sets_running") == sets
	})
	m := runs(t, gws[0])
	if len(m[0]) != 1 || len(m[1]) != 1 {
		t.Fatalf("SETs by gateway %v; want one each", m)
	}
	// a runs SET 0, where the envelope is made; b runs SET 1.
	a, b := gws[0], gws[1]
	if m[0][0] != 0 {
		a, b = b, a
	}
	sender, here := login(t, a, 2), login(t, a, 4)     // SET 0
	there := []*client{login(t, b, 1), login(t, b, 3)} // SET 1: pushes and OPENs cross

	const total = 1000
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, total, []uint32{1, 3, 4}))
	st, env := sender.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	for _, c := range append([]*client{here}, there...) {
		if pe, _, _, _ := c.push(proto.Envelope).Envelope(); pe != env {
			t.Fatalf("user %d: ENVELOPE of %d; want %d", c.user, pe, env)
		}
	}
	open := func(c *client) (uint8, uint32) {
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		st, _, amount := c.answer(s).OpenResult()
		return st, amount
	}
	// User 1's share crosses from a before the fault.
	st1, share1 := open(there[0])
	if st1 != proto.OpenOK || share1 == 0 {
		t.Fatalf("user 1's OPEN across gateways: status %d, %d fen; want 0", st1, share1)
	}

	// a goes deaf and idle; user 3's OPEN is in flight to it.
	if err := a.LeaveCluster(); err != nil {
		t.Fatal(err)
	}
	s3 := there[1].nextStamp()
	there[1].send(proto.AppendOpen(nil, s3, env))
	select {
	case <-a.Lost():
	case <-time.After(waitTime):
		t.Fatal("gateway a was not fenced")
	}
	waitFor(t, "gateway b to run every SET", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets })
	told := map[uint32]uint32{1: share1}
	if st, _, amount := there[1].answer(s3).OpenResult(); st == proto.OpenOK {
		told[3] = amount // a drew it and made it durable before it went deaf
	} else if st != proto.OpenOverloaded {
		t.Fatalf("user 3's OPEN in flight at the fault: status %d; want 0 or 5", st)
	}
	if err := a.shutdown(); !errors.As(err, new(*server.LostError)) {
		t.Fatalf("the fenced gateway's Shutdown: %v; want a LostError", err)
	}
	here.expectError(proto.ErrCodeMoved)
	here = login(t, b, 4)

	// At the new owner: the same share again for user 1 (and 3, if told);
	// a first one for the others.
	for _, c := range []*client{there[0], there[1], here} {
		st, amount := open(c)
		switch was, ok := told[c.user]; {
		case ok && (st != proto.OpenAlready || amount != was):
			t.Fatalf("user %d's OPEN at the new owner: status %d, %d fen; want 1 with the %d told before", c.user, st, amount, was)
		case !ok && (st != proto.OpenOK || amount == 0):
			t.Fatalf("user %d's OPEN at the new owner: status %d, %d fen; want 0", c.user, st, amount)
		}
		told[c.user] = amount
	}
	var sum uint64
	for _, v := range told {
		sum += uint64(v)
	}
	after := b.stats()
	if sum != total || after.Envelopes.OpenedAmount != total || after.Envelopes.CreatedAmount != total {
		t.Fatalf("shares told %v (%d fen); the new owner counts %d opened of %d created; want all %d", told, sum, after.Envelopes.OpenedAmount, after.Envelopes.CreatedAmount, total)
	}
	checkEnvelopeLedger(t, after)
}

// settled waits until every gateway of gws runs sets SETs, then stops their
// rebalancing: the SETs stay where they are for the test's faults.
func settled(t *testing.T, gws []*testServer, sets int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("every gateway to run %d SETs", sets), func() bool {
		for _, g := range gws {
			if metric(t, g, "hongbao_cluster_sets_running") != uint64(sets) {
				return false
			}
		}
		return true
	})
	for _, g := range gws {
		g.SetRebalance(-1)
	}
}

// TestReplicatedCampaignOutlivesItsDealer: a campaign created on a gateway
// that runs no SET is dealt by the one that runs them (the campaign is in
// the cluster's registry, each SET's share the SET's own); when that
// gateway goes deaf and idle mid-campaign, the gateway that takes its SETs
// over deals what is left of each share, and the campaign ends at exactly
// its total: no envelope lost with the dealer, none dealt twice.
func TestReplicatedCampaignOutlivesItsDealer(t *testing.T) {
	t.Parallel() // it waits on leases, not on the CPU
	const sets, total = 4, 6000
	a, b := ownerAndSecond(t, sets)
	c := b.startCampaign("shake", fmt.Sprintf("rate=2000&total=%d&min=1&max=100", total))
	waitFor(t, "gateway 0 to deal a part of it", func() bool { return a.stats().Shake.Created > total/5 })
	if err := a.LeaveCluster(); err != nil {
		t.Fatal(err)
	}
	if a.stats().Shake.Created >= total {
		t.Fatal("the campaign was dealt in full before the fault: nothing tested")
	}
	waitFor(t, "gateway 1 to take every SET over", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets })
	// Finished on gateway 1 means: by every SET it runs now. A SET still
	// loading is not one of them yet, so wait for all four.
	var st campaign.Status
	waitFor(t, "gateway 1 to deal the campaign in full over every SET", func() bool {
		for _, x := range b.campaigns() {
			if x.ID == c.ID {
				st = x
			}
		}
		return st.Done && st.Sets == sets
	})
	waitFor(t, "the SETs to hold every envelope dealt", func() bool { return b.stats().Shake.Created >= total })
	time.Sleep(200 * time.Millisecond) // a deal beyond the total would land by now
	got := b.stats()
	if got.Shake.Created != total || st.Sets != sets || st.Amount != got.Shake.CreatedAmount {
		t.Fatalf("after the failover: the SETs hold %d envelopes of %d fen dealt, the campaign says %d of %d fen over %d SETs; want exactly %d, the same fen, %d SETs",
			got.Shake.Created, got.Shake.CreatedAmount, st.Dealt, st.Amount, st.Sets, total, sets)
	}
	checkShakeLedger(t, got)
}

// TestReplicatedForgedCampaignOps: the campaigns' ops on the journal's
// stream are refused, counted and logged when they lack the admin token's
// proof or name another gateway than the subject they were written on;
// a signed op starts its campaign.
func TestReplicatedForgedCampaignOps(t *testing.T) {
	t.Parallel() // it waits on JetStream, not on the CPU
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a := startReplicated(t, ns, 0, 2, 2, func(o *server.Options) { o.AdminToken = "t0k" })
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	op := func(from, id int) []byte {
		b, _ := json.Marshal(map[string]any{"op": "start", "from": from, "id": id,
			"params": map[string]any{"kind": "shake", "rate": 10, "total": 10, "min": 1, "max": 1}})
		return b
	}
	put := func(subject string, signed cluster.SignedOp) {
		t.Helper()
		b, _ := json.Marshal(signed)
		if _, err := js.Publish(t.Context(), subject, b); err != nil {
			t.Fatal(err)
		}
	}
	before := forged(t, a, "request")
	put("hongbao.j.campaigns.1.op", cluster.SignedOp{Op: op(1, 1)})                                                // no proof
	put("hongbao.j.campaigns.1.op", cluster.SignedOp{Op: op(0, 2), Proof: cluster.Proof([]byte("t0k"), op(0, 2))}) // another gateway's name
	waitFor(t, "both forged ops refused", func() bool { return forged(t, a, "request") == before+2 })
	if list := a.campaigns(); len(list) != 0 {
		t.Fatalf("campaigns after forged ops: %+v; want none", list)
	}
	put("hongbao.j.campaigns.1.op", cluster.SignedOp{Op: op(1, 3), Proof: cluster.Proof([]byte("t0k"), op(1, 3))})
	waitFor(t, "the signed op's campaign to start", func() bool { return len(a.campaigns()) == 1 })
}
