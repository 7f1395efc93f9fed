package cluster

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// openAnswer is the OPEN_RESULT a gateway sends back for the OPEN ev.
func openAnswer(ev *event.Event) *event.Event {
	a := &event.Event{Kind: event.KAnswer, User: ev.User}
	a.SetFrame(proto.AppendOpenResult(a.Out[:0], ev.Stamp, proto.OpenOK, ev.Env, 7))
	return a
}

func TestSender(t *testing.T) {
	n := &Node{o: Options{Node: 1, Nodes: 3, Subject: "hongbao"}}
	f := func(subject string, want int, wantPeer bool) {
		t.Helper()
		node, ok := n.sender(subject)
		if !ok {
			node = -1
		}
		if _, peer := n.peerSender(subject); node != want || peer != wantPeer {
			t.Errorf("%s: sender %d, peer %v; want %d, %v", subject, node, peer, want, wantPeer)
		}
	}
	f("hongbao.gw.0.beat", 0, true)
	f("hongbao.gw.2.ev.1", 2, true)
	f("hongbao.gw.1.beat", 1, false) // this gateway
	f("hongbao.gw.3.beat", 3, false) // not of this cluster's shape
	f("hongbao.gw.01.beat", -1, false)
	f("hongbao.gw.+1.beat", -1, false)
	f("hongbao.gw.-1.beat", -1, false)
	f("hongbao.gw.probe.beat", -1, false)
	f("hongbaox.gw.0.beat", -1, false)
	f("other.gw.0.beat", -1, false)
	f("hongbao.0.beat", -1, false)
}

// TestTakeAnswer: an answer is taken only from the gateway its crossing
// went to, for its user, as a frame answering its request; anything else
// leaves the crossing waiting for the real answer.
func TestTakeAnswer(t *testing.T) {
	x := newCrossings()
	open := &event.Event{Kind: event.KOpen, User: 4, Env: 9, Stamp: 11}
	chat := &event.Event{Kind: event.KChat, User: 4, Peer: 6, Stamp: 12}
	xo, xc := x.add(open, 2, 1e18), x.add(chat, 2, 1e18)
	frame := func(user uint32, b []byte) *event.Event {
		a := &event.Event{Kind: event.KAnswer, User: user}
		a.SetFrame(append(a.Out[:0], b...))
		return a
	}
	for _, c := range []struct {
		name string
		xid  uint32
		from int
		a    *event.Event
	}{
		{"another gateway", xo, 1, openAnswer(open)},
		{"another user", xo, 2, frame(5, openAnswer(open).Frame())},
		{"another stamp", xo, 2, frame(4, proto.AppendOpenResult(nil, 10, proto.OpenOK, 9, 7))},
		{"another envelope", xo, 2, frame(4, proto.AppendOpenResult(nil, 11, proto.OpenOK, 8, 7))},
		{"a SHAKE_RESULT", xo, 2, frame(4, proto.AppendShakeResult(nil, 11, proto.ShakeGot, 9, 7))},
		{"a CHAT_ACK to an OPEN", xo, 2, frame(4, proto.AppendChatAck(nil, 11, proto.ChatHanded, 6))},
		{"bytes after the frame", xo, 2, frame(4, append(openAnswer(open).Frame(), 0))},
		{"no frame", xo, 2, frame(4, nil)},
		{"a CHAT_ACK to another recipient", xc, 2, frame(4, proto.AppendChatAck(nil, 12, proto.ChatHanded, 7))},
		{"an OPEN_RESULT to a CHAT", xc, 2, frame(4, proto.AppendOpenResult(nil, 12, proto.OpenOK, 9, 7))},
	} {
		if _, why := x.takeAnswer(c.xid, c.from, c.a); why == "" || why == notWaiting {
			t.Errorf("%s: taken (%q); want refused", c.name, why)
		}
	}
	if x.waiting() != 2 {
		t.Fatalf("%d crossings waiting after refused answers; want 2", x.waiting())
	}
	if c, why := x.takeAnswer(xo, 2, openAnswer(open)); why != "" || c.env != 9 {
		t.Fatalf("the OPEN's answer: %q; want taken", why)
	}
	if _, why := x.takeAnswer(xc, 2, frame(4, proto.AppendChatAck(nil, 12, proto.ChatOffline, 6))); why != "" {
		t.Fatalf("the CHAT's answer: %q; want taken", why)
	}
	if _, why := x.takeAnswer(xo, 2, openAnswer(open)); why != notWaiting {
		t.Fatalf("a second answer: %q; want %q", why, notWaiting)
	}
}

// TestMayNotSend: a gateway speaks for its own users and envelopes only,
// with frames of the kind its events say.
func TestMayNotSend(t *testing.T) {
	rings := make([]*event.Ring, 4)
	for i := range rings {
		r, err := ring.New[event.Event](ring.Options{Size: 16})
		if err != nil {
			t.Fatal(err)
		}
		rings[i] = r
	}
	// Gateway 0 of 2 over 4 SETs: users 1 and 3 (SETs 1, 3) are gateway 1's, 2 gateway 0's.
	n := &Node{o: Options{Node: 0, Nodes: 2, Sets: 4}, bus: event.NewBus(rings, 0)}
	envOf := func(set int) uint64 { return uint64(set)<<51 | 5 }
	push := func(user uint32, env, frameEnv uint64) *event.Event {
		ev := &event.Event{Kind: event.KPush, User: user, Env: env}
		ev.SetFrame(proto.AppendEnvelope(ev.Out[:0], 0, frameEnv, 9, 100, 2))
		return ev
	}
	chat := func(user uint32, frame []byte) *event.Event {
		b := bytebufferpool.Get()
		b.B = append(b.B[:0], frame...)
		return &event.Event{Kind: event.KChat, User: user, Peer: 2, Stamp: 3, Buf: b}
	}
	f := func(name string, ev *event.Event, ok bool) {
		t.Helper()
		if why := n.mayNotSend(1, ev); (why == "") != ok {
			t.Errorf("%s from gateway 1: refused %q; want ok %v", name, why, ok)
		}
	}
	f("an OPEN by its user", &event.Event{Kind: event.KOpen, User: 1, Env: envOf(0)}, true)
	f("an OPEN by another gateway's user", &event.Event{Kind: event.KOpen, User: 2, Env: envOf(0)}, false)
	for _, k := range []event.Kind{event.KLogin, event.KShake, event.KDeal, event.KShutdown, event.KSnapshot, event.KRetired17} {
		f("a "+k.String()+" event", &event.Event{Kind: k, User: 1, Env: envOf(0)}, false)
	}
	f("a re-push for another gateway's user", &event.Event{Kind: event.KRepush, User: 4, Env: envOf(0)}, false)
	f("a push of its envelope", push(2, envOf(1), envOf(1)), true)
	f("a push of another gateway's envelope", push(2, envOf(2), envOf(2)), false)
	f("a push whose frame names another envelope", push(2, envOf(1), envOf(3)), false)
	bad := push(2, envOf(1), envOf(1))
	bad.SetFrame(proto.AppendShakeResult(bad.Out[:0], 0, proto.ShakeGot, envOf(1), 20000))
	f("a push carrying a SHAKE_RESULT", bad, false)
	f("a chat from its user", chat(1, proto.AppendChatDeliver(nil, 3, 1, []byte("hi"))), true)
	f("a chat from another gateway's user", chat(2, proto.AppendChatDeliver(nil, 3, 2, []byte("hi"))), false)
	f("a chat whose CHAT_DELIVER names another sender", chat(1, proto.AppendChatDeliver(nil, 3, 5, []byte("hi"))), false)
	f("a chat carrying a SHAKE_RESULT", chat(1, proto.AppendShakeResult(nil, 3, proto.ShakeGot, 1, 20000)), false)

	// Where SETs fail over: SET 1 moved from gateway 1 to 0, and SET 2 has
	// always been gateway 0's. Gateway 1's late OPEN for its user of SET 1
	// is stale; one for SET 2 is forged.
	n.o.Owners = func(set int) int { return 0 }
	n.o.Former = func(set int) int {
		if set == 1 {
			return 1
		}
		return -1
	}
	if why := n.mayNotSend(1, &event.Event{Kind: event.KOpen, User: 1, Env: envOf(0)}); why != stale {
		t.Errorf("an OPEN from SET 1's former owner: %q; want %q", why, stale)
	}
	if why := n.mayNotSend(1, &event.Event{Kind: event.KOpen, User: 2, Env: envOf(0)}); why == "" || why == stale {
		t.Errorf("an OPEN for a SET gateway 1 never ran: %q; want forged", why)
	}

}

// deployConf is the nats-server configuration deploy/ ships, with the
// gateways' passwords set for it.
func deployConf(t *testing.T) string {
	t.Helper()
	for i := range 3 {
		t.Setenv("HONGBAO_GW"+string(rune('0'+i))+"_NATS_PASSWORD", "pw"+string(rune('0'+i)))
	}
	return filepath.Join("..", "deploy", "nats", "nats-server.conf")
}

func gatewayAuth(node int) Auth {
	return Auth{User: "gw" + string(rune('0'+node)), Password: "pw" + string(rune('0'+node))}
}

// TestDeployPermissionsMatch: the users of deploy/'s configurations have
// exactly the permissions the gateways need, no more: Permissions in
// nats-server.conf, JetStreamPermissions in nats-server-js.conf, which is
// besides one of three clustered JetStream servers syncing every write.
func TestDeployPermissionsMatch(t *testing.T) {
	t.Run("nats-server.conf", func(t *testing.T) {
		o, err := natsserver.ProcessConfigFile(deployConf(t))
		if err != nil {
			t.Fatal(err)
		}
		if o.JetStream || len(o.Routes) > 0 {
			t.Errorf("JetStream %v, %d routes; want a single server without JetStream", o.JetStream, len(o.Routes))
		}
		checkUsers(t, o, Permissions, false)
	})
	t.Run("nats-server-js.conf", func(t *testing.T) {
		o, err := natsserver.ProcessConfigFile(jsDeployConf(t))
		if err != nil {
			t.Fatal(err)
		}
		if !o.JetStream || !o.SyncAlways || o.StoreDir == "" || o.ServerName != "nats0" {
			t.Errorf("JetStream %v, synced always %v, store %q, server_name %q; want JetStream syncing every write, the store and name from the environment",
				o.JetStream, o.SyncAlways, o.StoreDir, o.ServerName)
		}
		if len(o.Routes) != 3 || o.Cluster.Name == "" || o.Cluster.Username == "" || o.Cluster.Password != "rpw" {
			t.Errorf("routes %v, cluster %q, route user %q: want 3 routes from the environment, a named cluster, routes authorized",
				o.Routes, o.Cluster.Name, o.Cluster.Username)
		}
		checkUsers(t, o, func(prefix string, node int) ([]string, []string) { return JetStreamPermissions(prefix, node, 3) }, true)
	})
}

// checkUsers checks that o's users are gw0, gw1 and gw2, each with exactly
// what perms gives its node, and with operator the operator, "admin", with
// exactly OperatorPermissions.
func checkUsers(t *testing.T, o *natsserver.Options, perms func(string, int) ([]string, []string), operator bool) {
	t.Helper()
	want := 3
	if operator {
		want++
	}
	if len(o.Users) != want {
		t.Fatalf("%d users in the configuration; want one for each of 3 gateways (and the operator: %v)", len(o.Users), operator)
	}
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	for _, u := range o.Users {
		if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
			t.Fatalf("user %q: without publish and subscribe permissions", u.Username)
		}
		var pub, sub []string
		if node, err := strconv.Atoi(strings.TrimPrefix(u.Username, "gw")); err == nil && strings.HasPrefix(u.Username, "gw") {
			pub, sub = perms("hongbao", node)
		} else if operator && u.Username == "admin" {
			pub, sub = OperatorPermissions()
		} else {
			t.Fatalf("user %q: not gw<node>, nor the operator", u.Username)
		}
		if got := u.Permissions.Publish.Allow; !slices.Equal(sorted(got), sorted(pub)) || len(u.Permissions.Publish.Deny) > 0 {
			t.Errorf("%s may publish on %q; want %q", u.Username, got, pub)
		}
		if got := u.Permissions.Subscribe.Allow; !slices.Equal(sorted(got), sorted(sub)) || len(u.Permissions.Subscribe.Deny) > 0 {
			t.Errorf("%s may subscribe to %q; want %q", u.Username, got, sub)
		}
	}
}

// TestDeployedPermissions: with deploy/'s configuration a client without
// credentials is refused, and a gateway's user cannot publish as another
// gateway, nor hear the events sent to another.
func TestDeployedPermissions(t *testing.T) {
	ns := embednats.StartTestConfig(t, deployConf(t))
	if nc, err := nats.Connect(ns.URL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	}
	opts, _ := gatewayAuth(1).options()
	nc, err := nats.Connect(ns.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subject := range []string{"hongbao.gw.0.beat", "hongbao.gw.0.ev.1", "hongbao.gw.2.ask.campaign", "hongbao.gw.0.answer.2", "hongbao.ev.0", "hongbao.campaign"} {
		nc.Publish(subject, []byte("{}"))
		nc.Flush()
		if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Errorf("gateway 1 published on %s: %v; want a permissions violation", subject, err)
		}
	}
	nc.Subscribe("hongbao.gw.*.ev.0", func(*nats.Msg) {})
	nc.Flush()
	if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("gateway 1 subscribed to the events for gateway 0: %v; want a permissions violation", err)
	}
}

// TestJoinRefusesLoosePermissions: a gateway whose NATS user may publish
// as any gateway refuses to start; with deploy/'s permissions it starts.
func TestJoinRefusesLoosePermissions(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "loose.conf")
	os.WriteFile(conf, []byte(`accounts { A { users: [{user: gw0, password: pw0}] } }`), 0o600)
	ns := embednats.StartTestConfig(t, conf)
	n, err := Join(Options{URL: ns.URL(), Node: 0, Nodes: 2, Sets: 2, Timeout: time.Second, Ring: 64, Auth: gatewayAuth(0)}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	err = n.Start(nil, nil)
	if err == nil || !strings.Contains(err.Error(), "could speak as any gateway") {
		t.Fatalf("Start with a user that may publish anywhere: %v; want refused", err)
	}
}

// TestForgeriesDropped: holding gateway 1's credentials, which let it speak
// as gateway 1 only, an attacker's events for gateway 0's own users and
// envelopes, a heartbeat naming gateway 0, one of gateway 1's own with an
// address no redirect can carry, answers to no request and a batch
// claiming another sender reach nothing and are counted.
func TestForgeriesDropped(t *testing.T) {
	ns := embednats.StartTestConfig(t, deployConf(t))
	nodes, _, counted := pair(t, ns, gatewayAuth)
	g0, got := nodes[0], counted[0]
	opts, _ := gatewayAuth(1).options()
	nc, err := nats.Connect(ns.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	batch := func(from int, evs ...event.Event) []byte {
		b := appendHeader(nil, from)
		for i := range evs {
			b = appendEvent(b, &evs[i], 0)
		}
		setCount(b, len(evs))
		return b
	}
	// In authPair, gateway 0 runs SET 0 (which counts what arrives), whose
	// users are the even ones and whose envelopes ids below 1<<51.
	const env = 5
	push := pushEvent(2, env) // gateway 0's own envelope
	beat, _ := json.Marshal(Gateway{Node: 0, Nodes: 2, Sets: 2, Addr: "203.0.113.1:9000", Instance: 42, Ready: true})
	// Its own heartbeat, with an address no LOGIN_ACK 3 can carry.
	long, _ := json.Marshal(Gateway{Node: 1, Nodes: 2, Sets: 2, Addr: strings.Repeat("x", 300) + ":9000", Instance: 43, Ready: true})
	for _, m := range []struct {
		subject string
		data    []byte
	}{
		{"hongbao.gw.1.ev.0", batch(1, event.Event{Kind: event.KDeal, User: 2, Env: env, Amount: 10000})}, // a deal into its pool
		{"hongbao.gw.1.ev.0", batch(1, event.Event{Kind: event.KOpen, User: 4, Env: env})},
		{"hongbao.gw.1.ev.0", batch(1, push)},
		{"hongbao.gw.1.ev.0", batch(0, pushEvent(2, env))}, // claims to come from gateway 0
		{"hongbao.gw.1.ev.0", batch(1, event.Event{Kind: event.KAnswer, User: 2})},
		{"hongbao.gw.1.beat", beat},
		{"hongbao.gw.1.beat", long},
		{"hongbao.gw.1.answer.0", []byte(`{"node":1}`)},
	} {
		if err := nc.Publish(m.subject, m.data); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	if err := nc.LastError(); err != nil {
		t.Fatalf("gateway 1's user could not publish on its own subjects: %v", err)
	}
	want := map[int]uint64{ForgedEvent: 4, ForgedBeat: 2, ForgedAnswer: 1}
	deadline := time.Now().Add(5 * time.Second)
	for k, w := range want {
		for g0.Forged(k) < w && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond) // nothing more may come
	for k := range ForgedKinds {
		if g := g0.Forged(k); g != want[k] {
			t.Errorf("%s forgeries counted: %d; want %d", ForgedName(k), g, want[k])
		}
	}
	if n := got.n.Load(); n != 0 {
		t.Errorf("%d forged events reached gateway 0's SET", n)
	}
	if n := g0.M.Late.Load(); n != 1 {
		t.Errorf("an answer to no crossing counted late %d times; want 1", n)
	}
	if g0.Conflict() || len(g0.Peers()) != 2 {
		t.Errorf("after a forged heartbeat: conflict %v, peers %v; want none, [0 1]", g0.Conflict(), g0.Peers())
	}
}
