package server_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// deployedNATS starts a NATS server with the configuration deploy/nats
// ships (a user per gateway, each allowed its own subjects only) and
// returns it with an edit that gives each gateway its user and password.
func deployedNATS(t *testing.T) (*embednats.Server, func(o *server.Options)) {
	t.Helper()
	dir := t.TempDir()
	for i := range 3 {
		t.Setenv(fmt.Sprintf("HONGBAO_GW%d_NATS_PASSWORD", i), fmt.Sprintf("secret-%d", i))
		os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), fmt.Appendf(nil, "secret-%d\n", i), 0o600)
	}
	ns := embednats.StartTestConfig(t, filepath.Join("..", "deploy", "nats", "nats-server.conf"))
	return ns, func(o *server.Options) {
		node, _, _ := strings.Cut(o.Node, "/")
		o.NATSUser, o.NATSPassFile = "gw"+node, filepath.Join(dir, node)
	}
}

// natsAs connects to ns as gateway node's NATS user: an attacker holding
// that gateway's credentials.
func natsAs(t *testing.T, ns *embednats.Server, node int) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.URL(), nats.UserInfo(fmt.Sprintf("gw%d", node), fmt.Sprintf("secret-%d", node)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// wireEvent is one event in the form gateways send each other (cluster's
// wire.go), for a forger to write by hand.
func wireEvent(kind event.Kind, user uint32, amount uint32, env uint64, out []byte) []byte {
	b := []byte{byte(kind), 0, byte(len(out)), 0, 0}
	b = binary.BigEndian.AppendUint32(b, user)
	b = binary.BigEndian.AppendUint32(b, 0)      // peer
	b = binary.BigEndian.AppendUint32(b, amount) // amount
	b = binary.BigEndian.AppendUint32(b, 0)      // total
	b = binary.BigEndian.AppendUint32(b, 0)      // crossing
	b = binary.BigEndian.AppendUint64(b, 0)      // stamp
	b = binary.BigEndian.AppendUint64(b, env)
	b = binary.BigEndian.AppendUint64(b, 0) // recv_ns
	b = append(b, out...)
	return binary.BigEndian.AppendUint16(b, 0) // no buf
}

// wireBatch is a batch of events from gateway from.
func wireBatch(from int, events ...[]byte) []byte {
	b := []byte{1}
	b = binary.BigEndian.AppendUint16(b, uint16(from))
	b = binary.BigEndian.AppendUint16(b, uint16(len(events)))
	for _, e := range events {
		b = append(b, e...)
	}
	return b
}

// forged reads hongbao_cluster_forged_total{kind} from g's /metrics.
func forged(t *testing.T, g *testServer, kind string) int {
	t.Helper()
	_, body := g.do("GET", "/metrics", g.token)
	m := regexp.MustCompile(`(?m)^hongbao_cluster_forged_total\{kind="` + kind + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no hongbao_cluster_forged_total{kind=%q} in /metrics", kind)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestClusterForgeries: gateways that are NATS users of their own, on the
// NATS configuration deploy/ ships, with an admin token. An attacker who
// holds one gateway's NATS credentials (not the admin token) cannot make
// money with them: a deal into another gateway's pool, an ENVELOPE push of
// an envelope that gateway does not own, a campaign without the admin
// token's proof, a heartbeat or a stats answer for another gateway all
// change nothing, and each is counted; publishing as another gateway is
// refused by NATS itself.
func TestClusterForgeries(t *testing.T) {
	const sets = 2
	ns, auth := deployedNATS(t)
	gws := startGateways(t, ns, 2, sets, func(o *server.Options) {
		auth(o)
		o.AdminToken = "cluster-admin-token"
	})

	// User 2 (SET 0, gateway 0) sends an envelope to users 4 and 6 (gateway 0 too).
	sender, r4, r6 := login(t, gws[0], 2), login(t, gws[0], 4), login(t, gws[0], 6)
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, 1000, []uint32{4, 6}))
	st, env := sender.answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	r6.push(proto.Envelope)
	r4.push(proto.Envelope)
	s = r4.nextStamp()
	r4.send(proto.AppendOpen(nil, s, env))
	st, _, share := r4.answer(s).OpenResult()
	if st != proto.OpenOK {
		t.Fatalf("OPEN: status %d", st)
	}

	// The attacker, as gateway 1: deal an envelope into gateway 0's pool; push user 6 a
	// SHAKE_RESULT dressed as an ENVELOPE of gateway 0's; start a campaign.
	nc := natsAs(t, ns, 1)
	fake := proto.AppendEnvelope(nil, 0, env, 2, 20000, 1)
	nc.Publish("hongbao.gw.1.ev.0", wireBatch(1,
		wireEvent(event.KDeal, 4, 20000, 1<<63|1, nil),
		wireEvent(event.KPush, 6, 0, env, fake)))
	op, _ := json.Marshal(map[string]any{"op": "start", "from": 1, "id": 1,
		"params": map[string]any{"kind": "shake", "rate": 1000000, "total": 1 << 32, "min": 20000, "max": 20000}})
	nc.Publish("hongbao.gw.1.ask.campaign", fmt.Appendf(nil, `{"op":%s}`, op))
	beat, _ := json.Marshal(map[string]any{"node": 0, "nodes": 2, "sets": sets, "addr": "203.0.113.9:9000", "instance": 7, "ready": true})
	nc.Publish("hongbao.gw.1.beat", beat)
	nc.Publish("hongbao.gw.1.answer.0", []byte(`{"node":1,"shake":{"got_amount":1000019999}}`))
	// As gateway 0: NATS refuses it.
	nc.Publish("hongbao.gw.0.ev.0", wireBatch(0, wireEvent(event.KDeal, 4, 20000, 1<<63|1, nil)))
	nc.Flush()
	if err := nc.LastError(); err == nil || !strings.Contains(err.Error(), "hongbao.gw.0.ev.0") {
		t.Errorf("publishing as gateway 0 with gateway 1's user: %v; want a permissions violation", err)
	}
	waitFor(t, "the forgeries counted", func() bool {
		return forged(t, gws[0], "event") == 2 && forged(t, gws[0], "request") == 1 && forged(t, gws[0], "heartbeat") == 1 &&
			forged(t, gws[0], "answer") == 1
	})

	// Nothing moved: user 4 is told "already opened" with its share, user 6 got no ENVELOPE
	// but the real one, no campaign runs, the cluster's stats are the gateways' own.
	s = r4.nextStamp()
	r4.send(proto.AppendOpen(nil, s, env))
	if st, _, again := r4.answer(s).OpenResult(); st != proto.OpenAlready || again != share {
		t.Fatalf("OPEN again: status %d, %d fen; want 1 with %d", st, again, share)
	}
	r6.ping() // anything pushed before the PONG would have come first
	if len(r6.pushes) != 0 {
		t.Errorf("user 6 got %d pushes besides its envelope's: %s", len(r6.pushes), describe(r6.pushes[0]))
	}
	for i, g := range gws {
		if cs := g.campaigns(); len(cs) != 0 {
			t.Errorf("gateway %d runs %d campaigns after a forged start: %+v", i, len(cs), cs)
		}
	}
	cs := clusterStats(t, gws[0])
	if cs.Gateways != 2 || cs.Envelopes.OpenedAmount != uint64(share) || cs.Shake.GotAmount != 0 || cs.Shake.Created != 0 {
		t.Errorf("/cluster/stats: %d gateways, opened %d, shake created %d, got %d; want 2, %d, 0, 0", cs.Gateways, cs.Envelopes.OpenedAmount, cs.Shake.Created, cs.Shake.GotAmount, share)
	}
	checkEnvelopeLedger(t, cs.Stats)
	var m struct {
		Gateways []struct {
			Addr string `json:"addr"`
		} `json:"gateways"`
	}
	gws[1].getJSON("/cluster", &m)
	if m.Gateways[0].Addr != gws[0].addr {
		t.Errorf("gateway 1 sends gateway 0's users to %q after a forged heartbeat; want %q", m.Gateways[0].Addr, gws[0].addr)
	}

	// The admin API's own campaign, signed with the token, is dealt on both gateways.
	c := gws[1].startCampaign("shake", "rate=100000&total=20&min=1&max=10")
	waitFor(t, "both gateways' parts dealt", func() bool { return clusterStats(t, gws[0]).Shake.Created == 20 })
	if got := gws[0].campaigns(); len(got) != 1 || got[0].ID != c.ID {
		t.Errorf("gateway 0's campaigns: %+v; want its part of %d", got, c.ID)
	}
}

// TestClusterAdminTokensDiffer: a gateway whose admin token differs from
// the one that created a campaign refuses its part, and says so.
func TestClusterAdminTokensDiffer(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	gws := startGateways(t, embednats.StartTest(t), 2, 2, func(o *server.Options) {
		o.AdminToken = "token-of-" + o.Node
	})
	gws[1].startCampaign("shake", "rate=1000&total=20&min=1&max=10")
	waitFor(t, "the refused part counted", func() bool { return forged(t, gws[0], "request") == 1 })
	if got := gws[0].campaigns(); len(got) != 0 {
		t.Errorf("gateway 0 started a part of a campaign signed with another token: %+v", got)
	}
}
