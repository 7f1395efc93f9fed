package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	hbclient "github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/replicated"
	"github.com/hongbao-io/hongbao/server"
)

// shaker is an application's client of one user, given every gateway,
// shaking until stopped: it follows its SET wherever it moves and counts
// the money it was told.
type shaker struct {
	c          *hbclient.Client
	told, got  atomic.Uint64
	refused    atomic.Uint64 // answered "overloaded": retry
	failed     atomic.Uint64 // no answer: ERROR 9 or the connection lost
	lastAddr   atomic.Pointer[string]
	stop       chan struct{}
	done       chan struct{}
	unexpected atomic.Pointer[error]
}

func startShaker(t *testing.T, user uint32, addrs ...string) *shaker {
	t.Helper()
	c, err := hbclient.Dial(t.Context(), addrs, hbclient.ReconnectWait(5*time.Millisecond, 50*time.Millisecond), hbclient.PingInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(t.Context(), user, nil); err != nil {
		t.Fatal(err)
	}
	sh := &shaker{c: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sh.done)
		for {
			select {
			case <-sh.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTime)
			_, amount, err := c.Shake(ctx)
			cancel()
			addr := c.Addr()
			sh.lastAddr.Store(&addr)
			switch {
			case err == nil:
				sh.told.Add(uint64(amount))
				sh.got.Add(1)
			case errors.Is(err, hbclient.ErrOverloaded), errors.Is(err, hbclient.ErrEmpty):
				sh.refused.Add(1)
				time.Sleep(time.Millisecond)
			case errors.Is(err, hbclient.ErrMoved), errors.Is(err, hbclient.ErrConnLost):
				sh.failed.Add(1)
			default:
				sh.unexpected.Store(&err)
				return
			}
		}
	}()
	t.Cleanup(func() { sh.halt(); c.Close() })
	return sh
}

func (sh *shaker) halt() {
	select {
	case <-sh.stop:
	default:
		close(sh.stop)
	}
	<-sh.done
}

// TestReplicatedMove: a SET moves to another gateway and back while its
// users shake without pause: each move answers with its pause; the users,
// sent ERROR 9, log in at the new owner by themselves; every fen told is
// counted exactly once — a request in flight at ERROR 9 was not carried
// out — and the pools are whole; the old owner counts the SET no more.
func TestReplicatedMove(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	const sets = 2
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a, dealt := dealtOwner(t, ns, 2, sets)
	b := startReplicated(t, ns, 1, 2, sets, nil)

	shakers := shakersOf(t, []uint32{2, 4, 6, 1}, a, b) // SET 0 but user 1
	moneyFrom := func(addr string, what string) {
		t.Helper()
		marks := make([]uint64, len(shakers))
		for i, sh := range shakers {
			marks[i] = sh.got.Load()
		}
		waitFor(t, what, func() bool {
			for i, sh := range shakers[:3] {
				if p := sh.lastAddr.Load(); p == nil || *p != addr || sh.got.Load() <= marks[i] {
					return false
				}
			}
			return true
		})
	}
	moneyFrom(a.addr, "SET 0's users to get money at gateway 0")
	// A SHAKE with a request id at gateway 0, retried with the id wherever
	// SET 0 is: the same answer at each, one envelope taken.
	shakeID := proto.NewRequestID(time.Now().Unix(), 1)
	withID := func(ts *testServer) string {
		t.Helper()
		c := login(t, ts, 8) // SET 0, no shaker's
		var body string
		waitFor(t, "an answer to the SHAKE with a request id other than overloaded", func() bool {
			s := c.nextStamp()
			c.send(proto.AppendShakeID(nil, s, shakeID))
			f := c.answer(s)
			body = string(f.Body)
			st, _, _ := f.ShakeResult()
			return st != proto.ShakeOverloaded // refused at the door: asked again, as a client does
		})
		return body
	}
	first := withID(a)
	if st, _, _ := parse(proto.ShakeResult, first).ShakeResult(); st != proto.ShakeGot {
		t.Fatalf("a SHAKE with a request id answered %d", st)
	}

	move := func(via *testServer, to string, epoch uint64) replicated.MoveResult {
		t.Helper()
		code, body := via.do("POST", "/sets/0/move?to="+to, "")
		if code != 200 {
			t.Fatalf("POST /sets/0/move?to=%s: %d %s", to, code, body)
		}
		var res replicated.MoveResult
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		if res.Set != 0 || res.To != to || res.Epoch != epoch || res.PauseMs <= 0 || res.ClaimSeq <= res.LastSeq {
			t.Fatalf("move: %+v; want SET 0 to %s at epoch %d", res, to, epoch)
		}
		t.Logf("SET 0 moved to %s: pause %.1f ms (cut %.1f, switch %.1f), prepared in %.1f ms", to, res.PauseMs, res.CutMs, res.SwitchMs, res.PrepareMs)
		return res
	}
	move(a, "gw1", 2)
	moneyFrom(b.addr, "SET 0's users to get money at gateway 1")
	if again := withID(b); again != first {
		t.Fatalf("the SHAKE retried with its id after the move: %x; first %x", again, first)
	}
	if m := runs(t, a); len(m[0]) != 1 || m[0][0] != 1 || len(m[1]) != 1 || m[1][0] != 0 {
		t.Fatalf("SETs by gateway after the move %v; want SET 0 at gateway 1", m)
	}
	// Each gateway's state of SET 0, one value in GET /cluster.
	waitFor(t, "GET /cluster to show SET 0 served at gateway 1 and told there only", func() bool {
		pa, pb := placementOf(t, a)[0], placementOf(t, b)[0]
		return pb.Role == "serving" && pb.Tells && pb.Owner == "gw1" && pb.Epoch == 2 && !pa.Tells && pa.Role != "serving" && pa.OwnerNode == 1
	})
	// Back, asked at the gateway that does not run it: its owner moves it.
	move(a, "gw0", 3)
	moneyFrom(a.addr, "SET 0's users to get money at gateway 0 again")
	if again := withID(a); again != first {
		t.Fatalf("the SHAKE retried with its id after the move back: %x; first %x", again, first)
	}
	for _, sh := range shakers {
		sh.halt()
		if p := sh.unexpected.Load(); p != nil {
			t.Fatalf("a shaker: %v", *p)
		}
	}
	_, _, amount := parse(proto.ShakeResult, first).ShakeResult()
	told, got := uint64(amount), uint64(1) // the SHAKE with an id: one envelope, told three times
	for _, sh := range shakers {
		told, got = told+sh.told.Load(), got+sh.got.Load()
	}
	waitFor(t, "the ledgers to settle", func() bool {
		sa, sb := a.stats(), b.stats()
		return sa.Shake.Got+sb.Shake.Got == got && sb.Shake.Got == 0
	})
	sa, sb := a.stats(), b.stats()
	if sa.Shake.GotAmount+sb.Shake.GotAmount != told || sa.Shake.Got+sb.Shake.Got != got {
		t.Fatalf("told %d envelopes, %d fen; counted %d, %d fen at gateway 0 and %d, %d at gateway 1: want exactly what was told",
			got, told, sa.Shake.Got, sa.Shake.GotAmount, sb.Shake.Got, sb.Shake.GotAmount)
	}
	if sa.Shake.GotAmount+sa.Shake.PoolAmount != dealt || sb.Shake.PoolAmount != 0 {
		t.Fatalf("got %d + pool %d fen at gateway 0, pool %d at gateway 1; want the %d dealt, all at gateway 0", sa.Shake.GotAmount, sa.Shake.PoolAmount, sb.Shake.PoolAmount, dealt)
	}
	checkShakeLedger(t, sa)
	if metric(t, a, "hongbao_cluster_moves_total") != 1 || metric(t, b, "hongbao_cluster_moves_total") != 1 {
		t.Errorf("moves counted: %d at gateway 0, %d at gateway 1; want 1 each", metric(t, a, "hongbao_cluster_moves_total"), metric(t, b, "hongbao_cluster_moves_total"))
	}
	var refused, failed uint64
	for _, sh := range shakers {
		refused, failed = refused+sh.refused.Load(), failed+sh.failed.Load()
	}
	t.Logf("%d SHAKEs got money, %d answered overloaded or empty, %d without an answer (ERROR 9, lost connection)", got, refused, failed)
}

// countedExactly halts the shakers and checks that gateway a, which runs
// every SET now, counts exactly the money they were told, its pools holding
// the rest of what was dealt.
func countedExactly(t *testing.T, a *testServer, shakers []*shaker, dealt uint64) {
	t.Helper()
	got, told := halted(t, shakers)
	st := a.stats()
	if st.Shake.Got != got || st.Shake.GotAmount != told || st.Shake.GotAmount+st.Shake.PoolAmount != dealt {
		t.Fatalf("told %d envelopes, %d fen; gateway 0 counts %d, %d fen, pool %d fen of %d dealt: want exactly what was told, the pools whole",
			got, told, st.Shake.Got, st.Shake.GotAmount, st.Shake.PoolAmount, dealt)
	}
	checkShakeLedger(t, st)
}

// shakersOf starts a shaker for each of users, given the gateways.
func shakersOf(t *testing.T, users []uint32, gws ...*testServer) []*shaker {
	t.Helper()
	var addrs []string
	for _, g := range gws {
		addrs = append(addrs, g.addr)
	}
	var out []*shaker
	for _, u := range users {
		out = append(out, startShaker(t, u, addrs...))
	}
	return out
}

// halted stops the shakers and returns what they were told: envelopes and
// fen.
func halted(t *testing.T, shakers []*shaker) (got, told uint64) {
	t.Helper()
	for _, sh := range shakers {
		sh.halt()
		if p := sh.unexpected.Load(); p != nil {
			t.Fatalf("a shaker: %v", *p)
		}
		got, told = got+sh.got.Load(), told+sh.told.Load()
	}
	return got, told
}

// moneyFromEach waits until every shaker got money after it was called.
func moneyFromEach(t *testing.T, what string, shakers []*shaker) {
	t.Helper()
	marks := make([]uint64, len(shakers))
	for i, sh := range shakers {
		marks[i] = sh.got.Load()
	}
	waitFor(t, what, func() bool {
		for i, sh := range shakers {
			if sh.got.Load() <= marks[i] {
				return false
			}
		}
		return true
	})
}

// TestReplicatedJoinAndLeave: a gateway that joins takes its even share of
// the SETs, moved one at a time while their users shake; told to leave
// (its stop), it hands every SET back before it exits. Every fen told is
// counted exactly once at the end, on the gateway left with every SET.
func TestReplicatedJoinAndLeave(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	const sets = 4
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a, dealt := dealtOwner(t, ns, 2, sets)
	shakers := shakersOf(t, []uint32{4, 1, 2, 3, 8, 5}, a)
	moneyFromEach(t, "every user to get money", shakers)

	// Gateway 0 evens the SETs out as soon as gateway 1 is heard.
	a.SetRebalance(50 * time.Millisecond)
	b := startReplicated(t, ns, 1, 2, sets, nil)
	waitFor(t, "gateway 1 to take its share", func() bool { return metric(t, b, "hongbao_cluster_sets_running") == sets/2 })
	// The source counts a move once the target's answer is back: after the
	// target serves.
	waitFor(t, "gateway 0 to count its moves", func() bool { return metric(t, a, "hongbao_cluster_moves_total") >= sets/2 })
	if n := metric(t, a, "hongbao_cluster_moves_total"); n != sets/2 {
		t.Fatalf("gateway 0 handed %d SETs over; want %d, its surplus", n, sets/2)
	}
	moneyFromEach(t, "every user to get money after the rebalance", shakers)

	// Gateway 1 leaves: its stop hands its SETs back first.
	if err := b.shutdown(); err != nil {
		t.Fatalf("gateway 1's stop: %v", err)
	}
	if n := metric(t, a, "hongbao_cluster_sets_running"); n != sets {
		t.Fatalf("gateway 0 runs %d SETs after gateway 1 left; want all %d", n, sets)
	}
	moneyFromEach(t, "every user to get money after gateway 1 left", shakers)
	countedExactly(t, a, shakers, dealt)
}

// TestReplicatedMoveTargetDies: the target of a move claims the SET and
// dies before it serves. Nobody serves the
// SET until the target's lease lapses; then the old owner takes it back
// from JetStream. Never both: the target served nothing, and every fen told
// is counted exactly once.
func TestReplicatedMoveTargetDies(t *testing.T) {
	const sets = 2
	ns := embednats.StartTestJetStream(t, t.TempDir())
	a, dealt := dealtOwner(t, ns, 2, sets)
	b := startReplicated(t, ns, 1, 2, sets, nil)
	shakers := shakersOf(t, []uint32{2, 4, 6}, a, b)
	moneyFromEach(t, "SET 0's users to get money", shakers)

	dead := make(chan struct{})
	server.SetSwitchHook(func(point string) {
		if point == "claimed" {
			b.LeaveCluster() // deaf from now on, as if dead
			<-dead
		}
	})
	defer server.SetSwitchHook(nil)
	defer close(dead)
	a.hc.Timeout = time.Minute // the move waits for the target's answer
	code, body := a.do("POST", "/sets/0/move?to=gw1", "")
	if code != 503 {
		t.Fatalf("a move whose target died: %d %s; want 503", code, body)
	}
	waitFor(t, "gateway 0 to run SET 0 again", func() bool { return metric(t, a, "hongbao_cluster_sets_running") == sets })
	if n := metric(t, b, "hongbao_cluster_sets_running"); n != 0 {
		t.Fatalf("the dead target runs %d SETs; want none", n)
	}
	moneyFromEach(t, "SET 0's users to get money at gateway 0 again", shakers)
	countedExactly(t, a, shakers, dealt)
}

// TestReplicatedMoveOwnerDead: a move of a SET whose owner just died
// (deaf, its lease not yet lapsed) is asked of another gateway: it answers
// 503 within about the lease, not the move's bound, and a move of that
// gateway's own SET meanwhile is not blocked by it; the dead owner's SET
// fails over as usual.
func TestReplicatedMoveOwnerDead(t *testing.T) {
	t.Parallel() // it waits on JetStream and leases, not on the CPU
	const sets = 3
	ns := embednats.StartTestJetStream(t, t.TempDir())
	var gws []*testServer
	for node := range 3 {
		gws = append(gws, startReplicated(t, ns, node, 3, sets, func(o *server.Options) { o.Rebalance = 100 * time.Millisecond }))
	}
	settled(t, gws, 1)
	ran := runs(t, gws[1])
	dead, own := ran[0][0], ran[1][0]
	gws[0].LeaveCluster() // deaf from now on, as if dead
	gws[1].hc.Timeout = time.Minute
	type answer struct {
		code int
		body []byte
		took time.Duration
	}
	answers := make(chan answer, 1)
	start := time.Now()
	go func() {
		code, body := gws[1].do("POST", fmt.Sprintf("/sets/%d/move?to=gw2", dead), "")
		answers <- answer{code, body, time.Since(start)}
	}()
	code, body := gws[1].do("POST", fmt.Sprintf("/sets/%d/move?to=gw2", own), "")
	if code != 200 {
		t.Errorf("a move of gateway 1's own SET meanwhile: %d %s; want 200", code, body)
	}
	a := <-answers
	if a.code != 503 || a.took > 5*time.Second {
		t.Errorf("a move of the dead owner's SET: %d %s after %v; want 503 within about the lease", a.code, a.body, a.took.Round(time.Millisecond))
	}
	waitFor(t, "the dead owner's SET to fail over", func() bool {
		return metric(t, gws[1], "hongbao_cluster_sets_running")+metric(t, gws[2], "hongbao_cluster_sets_running") == sets
	})
}

// placementOf is every SET's state on gateway g, by GET /cluster.
func placementOf(t *testing.T, g *testServer) []replicated.SetStatus {
	t.Helper()
	code, body := g.do("GET", "/cluster", "")
	var m struct {
		Placement []replicated.SetStatus `json:"placement"`
	}
	if code != 200 || json.Unmarshal(body, &m) != nil {
		t.Fatalf("GET /cluster: %d %s", code, body)
	}
	return m.Placement
}

// TestReplicatedKeptPushMoves: a push kept for a user who is offline moves
// with the user's SET: the user, logging in at the SET's new owner, is
// pushed the envelope.
func TestReplicatedKeptPushMoves(t *testing.T) {
	t.Parallel() // it waits on JetStream, not on the CPU
	a, b := ownerAndSecond(t, 4)
	alice := login(t, a, 1)
	s := alice.nextStamp()
	alice.send(proto.AppendSend(nil, s, 100, []uint32{2})) // bob, of SET 2, is offline
	st, env := alice.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	waitFor(t, "the push kept for bob", func() bool { return a.stats().Envelopes.Pending.Waiting == 1 })
	if code, body := a.do("POST", "/sets/2/move?to=gw1", ""); code != 200 {
		t.Fatalf("POST /sets/2/move?to=gw1: %d %s", code, body)
	}
	bob := login(t, b, 2)
	if got, _, _, _ := bob.push(proto.Envelope).Envelope(); got != env {
		t.Fatalf("bob was pushed %#x at the SET's new owner; want %#x", got, env)
	}
}
