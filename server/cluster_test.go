package server_test

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// startGateways starts gateways 0..n−1 of a cluster of n over ns, with
// sets SETs in all.
func startGateways(t testing.TB, ns *embednats.Server, n, sets int, edit func(o *server.Options)) []*testServer {
	t.Helper()
	procs := runtime.GOMAXPROCS(0) // a gateway raises it for the process: the tests after run as before
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	gws := make([]*testServer, n)
	for i := range gws {
		gws[i] = startServer(t, func(o *server.Options) {
			o.Sets, o.NATS, o.Node = sets, ns.URL(), fmt.Sprintf("%d/%d", i, n)
			o.ClusterTimeout = 500 * time.Millisecond
			if edit != nil {
				edit(o)
			}
		})
	}
	waitFor(t, "every gateway to see the others", func() bool {
		for _, g := range gws {
			var m struct {
				Gateways []struct {
					Up   bool   `json:"up"`
					Addr string `json:"addr"`
				} `json:"gateways"`
			}
			g.getJSON("/cluster", &m)
			for _, gw := range m.Gateways {
				if !gw.Up || gw.Addr == "" {
					return false
				}
			}
		}
		return true
	})
	return gws
}

// TestClusterFreeP: a gateway with an epoll loop per P runs one P more, so
// that the NATS client's goroutines, woken by the runtime's netpoller, never
// wait for sysmon to take a P from a loop blocked in epoll_wait.
func TestClusterFreeP(t *testing.T) {
	if *ingressMode != "epoll" {
		t.Skip("-ingress netpoll: the loops block in the netpoller, not in epoll_wait")
	}
	procs := runtime.GOMAXPROCS(0)
	startGateways(t, embednats.StartTest(t), 2, 2, func(o *server.Options) { o.Loops = procs })
	if got := runtime.GOMAXPROCS(0); got != procs+1 {
		t.Errorf("GOMAXPROCS %d with %d epoll loops; want %d", got, procs, procs+1)
	}
}

// TestClusterNetpollerWait: with -loop-wait netpoller a blocked epoll loop
// holds no P, so a gateway keeps GOMAXPROCS; a chat still crosses both ways.
func TestClusterNetpollerWait(t *testing.T) {
	if *ingressMode != "epoll" {
		t.Skip("-ingress netpoll: no epoll loops")
	}
	const sets = 2
	procs := runtime.GOMAXPROCS(0)
	gws := startGateways(t, embednats.StartTest(t), 2, sets, func(o *server.Options) { o.Loops, o.LoopWait = procs, "netpoller" })
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d with loops parked in the netpoller; want %d as before", got, procs)
	}
	a, b := login(t, owner(gws, sets, 2), 2), login(t, owner(gws, sets, 1), 1) // gateways 0 and 1
	for _, c := range []struct {
		from, to *client
		user     uint32
	}{{a, b, 1}, {b, a, 2}} {
		s := c.from.nextStamp()
		c.from.send(proto.AppendChat(nil, s, c.user, []byte("hi")))
		if st, _ := c.from.answer(s).ChatAck(); st != proto.ChatHanded {
			t.Fatalf("CHAT to user %d across gateways: status %d", c.user, st)
		}
		if _, text := c.to.push(proto.ChatDeliver).ChatDeliver(); string(text) != "hi" {
			t.Fatalf("user %d got %q", c.user, text)
		}
	}
}

// owner returns the gateway of user in a cluster of len(gws) gateways over sets SETs.
func owner(gws []*testServer, sets int, user uint32) *testServer {
	return gws[int(user)%sets%len(gws)]
}

// clusterStats is GET /cluster/stats.
func clusterStats(t testing.TB, g *testServer) server.ClusterStats {
	t.Helper()
	var st server.ClusterStats
	g.getJSON("/cluster/stats", &st)
	return st
}

// TestClusterCrossings: two gateways share one SET space: a SEND reaches
// recipients on both, each OPENs its share across gateways, a CHAT crosses
// and is delivered, a shake campaign created on one gateway is dealt on
// both, and the cluster's summed ledger reconciles exactly with what the
// clients were told.
func TestClusterCrossings(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 4
	ns := embednats.StartTest(t)
	gws := startGateways(t, ns, 2, sets, nil)

	// A LOGIN at the gateway that does not run the user's SET is sent to
	// the one that does, and the connection closed.
	wrong := dial(t, gws[0])
	ls := wrong.nextStamp()
	wrong.send(proto.AppendLogin(nil, ls, 1, nil))
	f := wrong.expect(proto.LoginAck, ls)
	if st, u := f.LoginAck(); st != proto.LoginWrongGateway || u != 1 || string(f.LoginRedirect()) != gws[1].addr {
		t.Fatalf("LOGIN of user 1 (SET 1) at gateway 0: status %d user %d address %q; want 3, 1, %q", st, u, f.LoginRedirect(), gws[1].addr)
	}
	wrong.expectClosed()

	users := []uint32{2, 1, 3, 4, 5, 6} // SETs 2,1,3,0,1,2: both gateways
	cl := map[uint32]*client{}
	for _, u := range users {
		cl[u] = login(t, owner(gws, sets, u), u)
	}

	// SEND from user 2 (gateway 0) to users on both gateways.
	sender := cl[2]
	rcpt := []uint32{1, 3, 4, 5, 6}
	const total = 1000
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, total, rcpt))
	st, env := sender.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	if envelope.OwnerSET(env) != 2 {
		t.Fatalf("envelope %d of SET %d; want the sender's SET 2", env, envelope.OwnerSET(env))
	}
	var opened uint64
	for _, u := range rcpt {
		c := cl[u]
		pe, from, tot, _ := c.push(proto.Envelope).Envelope()
		if pe != env || from != 2 || tot != total {
			t.Fatalf("user %d: ENVELOPE %d from %d of %d; want %d from 2 of %d", u, pe, from, tot, env, total)
		}
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		st, e, amount := c.answer(s).OpenResult()
		if st != proto.OpenOK || e != env || amount == 0 {
			t.Fatalf("user %d: OPEN_RESULT %d of %d, %d fen; want 0", u, st, e, amount)
		}
		opened += uint64(amount)
		// Again: "already", with the same share.
		s = c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		if st, _, again := c.answer(s).OpenResult(); st != proto.OpenAlready || again != amount {
			t.Fatalf("user %d: second OPEN: status %d, %d fen; want 1 with %d", u, st, again, amount)
		}
	}
	if opened != total {
		t.Errorf("shares add up to %d fen; want %d", opened, total)
	}

	// CHAT across gateways.
	s = sender.nextStamp()
	sender.send(proto.AppendChat(nil, s, 1, []byte("hi")))
	if st, to := sender.answer(s).ChatAck(); st != proto.ChatHanded || to != 1 {
		t.Fatalf("CHAT to a user on the other gateway: status %d to %d; want 0 to 1", st, to)
	}
	if from, text := cl[1].push(proto.ChatDeliver).ChatDeliver(); from != 2 || string(text) != "hi" {
		t.Fatalf("CHAT_DELIVER from %d %q", from, text)
	}

	// A campaign created on gateway 1 is dealt on both.
	c := gws[1].startCampaign("shake", "rate=100000&total=400&min=1&max=10")
	waitFor(t, "both gateways' parts dealt", func() bool {
		st := clusterStats(t, gws[0])
		return st.Shake.Created == 400
	})
	for i, g := range gws {
		if got := g.stats().Shake.Created; got != 200 {
			t.Errorf("gateway %d dealt %d of campaign %d; want its part, 200", i, got, c.ID)
		}
	}
	var got uint64
	for _, u := range users {
		for range 30 {
			s := cl[u].nextStamp()
			cl[u].send(proto.AppendShake(nil, s))
			if st, _, amount := cl[u].answer(s).ShakeResult(); st == proto.ShakeGot {
				got += uint64(amount)
			}
		}
	}
	cs := clusterStats(t, gws[1])
	if cs.Gateways != 2 || len(cs.Missing) != 0 {
		t.Errorf("/cluster/stats from %d gateways, missing %v; want 2, none", cs.Gateways, cs.Missing)
	}
	if cs.Shake.GotAmount != got || cs.Envelopes.OpenedAmount != opened || cs.Envelopes.CreatedAmount != total {
		t.Errorf("cluster ledger: shake got %d, opened %d, created %d; clients saw %d, %d, %d",
			cs.Shake.GotAmount, cs.Envelopes.OpenedAmount, cs.Envelopes.CreatedAmount, got, opened, total)
	}
	checkShakeLedger(t, cs.Stats)
	checkEnvelopeLedger(t, cs.Stats)
	for _, g := range gws {
		checkShakeLedger(t, g.stats())
		checkEnvelopeLedger(t, g.stats())
	}
}

// TestClusterGatewayDown: with the envelope's gateway gone, an OPEN answers
// "unavailable" within the bound, and a CHAT to its users too.
func TestClusterGatewayDown(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 4
	ns := embednats.StartTest(t)
	gws := startGateways(t, ns, 2, sets, nil)
	a, b := login(t, gws[0], 2), login(t, gws[1], 1)
	s := b.nextStamp()
	b.send(proto.AppendSend(nil, s, 100, []uint32{2}))
	_, env := b.answer(s).SendAck()
	a.push(proto.Envelope)
	if err := gws[1].shutdown(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s = a.nextStamp()
	a.send(proto.AppendOpen(nil, s, env))
	if st, _, amount := a.answer(s).OpenResult(); st != proto.OpenOverloaded || amount != 0 {
		t.Fatalf("OPEN of an envelope whose gateway is down: status %d, %d fen; want 5, 0", st, amount)
	}
	s = a.nextStamp()
	a.send(proto.AppendChat(nil, s, 1, []byte("x")))
	if st, _ := a.answer(s).ChatAck(); st != proto.ChatOverloaded {
		t.Fatalf("CHAT to a user of a gateway that is down: status %d; want 2", st)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answers took %v", d)
	}
	checkEnvelopeLedger(t, gws[0].stats())
}

// TestClusterJoinRefused: a gateway of another shape, or with a node
// number taken, does not start.
func TestClusterJoinRefused(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	ns := embednats.StartTest(t)
	startGateways(t, ns, 2, 4, nil)
	for _, c := range []struct {
		node string
		sets int
	}{{"1/2", 4}, {"0/3", 6}, {"1/2", 8}} {
		o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Sets: c.sets, Ring: 128, Loops: 1,
			Data: t.TempDir(), NATS: ns.URL(), Node: c.node}
		o.Fill()
		if s, err := server.New(o, discardLog()); err == nil {
			s.Shutdown(t.Context())
			t.Errorf("-node %s -sets %d joined a cluster of 2 gateways and 4 SETs", c.node, c.sets)
		} else {
			t.Logf("-node %s -sets %d: %v", c.node, c.sets, err)
		}
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// slowSync is a journal file whose syncs take delay (30 ms if 0) while
// slow is set.
type slowSync struct {
	*os.File
	slow  *atomic.Bool
	delay time.Duration
}

func (f slowSync) Sync() error {
	if f.slow.Load() {
		time.Sleep(cmp.Or(f.delay, 30*time.Millisecond))
	}
	return f.File.Sync()
}

// slowJournal is an Options.JournalCreate whose files sync in delay while
// slow is set.
func slowJournal(slow *atomic.Bool, delay time.Duration) func(string) (journal.File, error) {
	return func(path string) (journal.File, error) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		return slowSync{f, slow, delay}, err
	}
}

// TestClusterLateOpens: while the envelope's gateway takes longer to make a
// share durable than the bound of the opener's gateway, every OPEN crossing
// is answered "unavailable" though its share was drawn. The share stays
// its opener's: the OPEN sent again answers "already" with it, so each
// client is told one share, and the cluster counts exactly those.
func TestClusterLateOpens(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 2
	ns := embednats.StartTest(t)
	var slow atomic.Bool
	gws := startGateways(t, ns, 2, sets, func(o *server.Options) {
		if o.Node == "1/2" {
			o.ClusterTimeout = 10 * time.Millisecond
		} else {
			o.JournalCreate = slowJournal(&slow, 0)
		}
	})
	sender := login(t, gws[0], 2) // SET 0
	const n = 20
	openers := make([]*client, n)
	rcpt := make([]uint32, n)
	for i := range openers {
		rcpt[i] = uint32(2*i + 1) // SET 1: gateway 1
		openers[i] = login(t, gws[1], rcpt[i])
	}
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, 10*n, rcpt))
	st, env := sender.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	for _, c := range openers {
		c.push(proto.Envelope)
	}
	slow.Store(true)
	for _, c := range openers {
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		if st, _, amount := c.answer(s).OpenResult(); st != proto.OpenOverloaded || amount != 0 {
			t.Fatalf("OPEN while the envelope's journal is slower than the bound: status %d, %d fen; want 5, 0", st, amount)
		}
	}
	waitFor(t, "every share drawn", func() bool { return gws[0].stats().Envelopes.Opened == n })
	slow.Store(false)
	// Opened again until in time (a loaded machine can still miss 10 ms):
	// each answers "already", with the share drawn for the first.
	var told uint64
	for _, c := range openers {
		for try := 0; ; try++ {
			s := c.nextStamp()
			c.send(proto.AppendOpen(nil, s, env))
			st, _, amount := c.answer(s).OpenResult()
			if st == proto.OpenAlready {
				told += uint64(amount)
				break
			}
			if st != proto.OpenOverloaded || try == 100 {
				t.Fatalf("OPEN %d: status %d; want 1 (already), or 5 while the machine is slow", try, st)
			}
		}
	}
	cs := clusterStats(t, gws[0])
	if cs.Envelopes.Opened != n || cs.Envelopes.OpenedAmount != told || told != 10*n {
		t.Errorf("cluster counts %d shares, %d fen opened; clients were told %d of %d", cs.Envelopes.Opened, cs.Envelopes.OpenedAmount, told, 10*n)
	}
	checkEnvelopeLedger(t, cs.Stats)
}

// TestClusterShutdownKeepsShare: a gateway shut down while its OPEN
// crossing waits (its share drawn, slowly made durable) leaves the share
// drawn at the envelope's gateway, and the ledger whole: the opener learns
// it by sending the OPEN again.
func TestClusterShutdownKeepsShare(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 2
	ns := embednats.StartTest(t)
	var slow atomic.Bool
	gws := startGateways(t, ns, 2, sets, func(o *server.Options) {
		if o.Node == "0/2" {
			o.JournalCreate = slowJournal(&slow, 300*time.Millisecond) // longer than the other's shutdown
		}
	})
	sender, opener := login(t, gws[0], 2), login(t, gws[1], 1)
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, 100, []uint32{1}))
	if st, _ := sender.answer(s).SendAck(); st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	env, _, _, _ := opener.push(proto.Envelope).Envelope()
	slow.Store(true)
	opener.send(proto.AppendOpen(nil, opener.nextStamp(), env))
	waitFor(t, "the share drawn", func() bool { return gws[0].stats().Envelopes.Opened == 1 })
	if err := gws[1].shutdown(); err != nil {
		t.Fatal(err)
	}
	slow.Store(false)
	time.Sleep(100 * time.Millisecond) // nothing may take it back
	if st := gws[0].stats(); st.Envelopes.Opened != 1 || st.Envelopes.OpenedAmount != 100 {
		t.Errorf("opened %d, %d fen; want the one share, 100 fen, kept", st.Envelopes.Opened, st.Envelopes.OpenedAmount)
	}
	checkEnvelopeLedger(t, gws[0].stats())
}

// TestClusterCampaignParts: a campaign smaller than the cluster's SETs
// leaves some gateways no part (the one it was created on included), yet
// is dealt whole; ids are unique across gateways.
func TestClusterCampaignParts(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	const sets = 4
	ns := embednats.StartTest(t)
	gws := startGateways(t, ns, 2, sets, nil)
	a := gws[0].startCampaign("shake", "rate=100&total=1&min=5&max=5") // gateway 0's part: 1·2/4 → 0
	b := gws[1].startCampaign("shake", "rate=100&total=3&min=5&max=5")
	c := gws[0].startCampaign("shake", "rate=100&total=2&min=5&max=5")
	if a.ID == b.ID || a.ID == c.ID || b.ID == c.ID {
		t.Fatalf("campaign ids %d, %d, %d: want distinct", a.ID, b.ID, c.ID)
	}
	waitFor(t, "6 envelopes dealt over the cluster", func() bool {
		st := clusterStats(t, gws[0])
		return st.Shake.Created == 6 && st.Shake.CreatedAmount == 30
	})
	checkShakeLedger(t, clusterStats(t, gws[1]).Stats)
}
