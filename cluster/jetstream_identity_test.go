package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/jsjournal"
)

// jsUsersServer runs a single JetStream server (the replicas are 1) that
// lets in users only, each with its permissions; flags are nats-server
// feature flags (nil: the server's defaults).
func jsUsersServer(t *testing.T, users []embednats.User, flags map[string]bool) string {
	t.Helper()
	o := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), FeatureFlags: flags}
	for _, u := range users {
		o.Users = append(o.Users, &natsserver.User{Username: u.Name, Password: u.Password, Permissions: &natsserver.Permissions{
			Publish: &natsserver.SubjectPermission{Allow: u.Publish}, Subscribe: &natsserver.SubjectPermission{Allow: u.Subscribe}}})
	}
	ns, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// jsGateway is a gateway's journal connection, as ConnectJetStream dials
// it, with every asynchronous error NATS reported to it kept.
type jsGateway struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	mu   sync.Mutex
	errs []error
}

func dialJetStream(t *testing.T, url string, node int) *jsGateway {
	t.Helper()
	nc, err := ConnectJetStream(url, "hongbao", node, gatewayAuth(node), time.Minute) // its permissions, not its liveness
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g := &jsGateway{nc: nc}
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		g.mu.Lock()
		g.errs = append(g.errs, err)
		g.mu.Unlock()
	})
	if g.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return g
}

// violations are the permission violations NATS reported to g so far.
func (g *jsGateway) violations() []error {
	g.nc.Flush()
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Clone(g.errs)
	if err := g.nc.LastError(); err != nil {
		out = append(out, err)
	}
	return slices.DeleteFunc(out, func(err error) bool { return !errors.Is(err, nats.ErrPermissionViolation) })
}

// jsLayout is the tests' cluster on JetStream: 4 SETs, 2 gateways.
var jsLayout = jsjournal.Layout{Prefix: "hongbao", Sets: 4, Gateways: 2, Replicas: 1}

// operatorAuth is the operator's identity in the tests' NATS servers.
var operatorAuth = Auth{User: "admin", Password: "adminpw"}

// jsGatewayUsers are gateways 0 and 1 with perms, and the operator.
func jsGatewayUsers(perms func(string, int) ([]string, []string)) []embednats.User {
	var users []embednats.User
	for node := range 2 {
		pub, sub := perms("hongbao", node)
		a := gatewayAuth(node)
		users = append(users, embednats.User{Name: a.User, Password: a.Password, Publish: pub, Subscribe: sub})
	}
	pub, sub := OperatorPermissions()
	return append(users, embednats.User{Name: operatorAuth.User, Password: operatorAuth.Password, Publish: pub, Subscribe: sub})
}

// jsPermissions are JetStreamPermissions of a cluster of jsLayout's gateways.
func jsPermissions(prefix string, node int) ([]string, []string) {
	return JetStreamPermissions(prefix, node, jsLayout.Gateways)
}

// provisionAs makes url's JetStream hold l with the operator's identity.
func provisionAs(t *testing.T, url string, l jsjournal.Layout) {
	t.Helper()
	opts, err := operatorAuth.options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), exerciseTimeout)
	defer cancel()
	if _, err := jsjournal.Provision(ctx, js, l, false); err != nil {
		t.Fatal(err)
	}
}

// TestJetStreamPermissions: with exactly JetStreamPermissions a gateway
// does all it does on JetStream (the journal's stream, its appends, fences,
// replays, compactions and snapshots; the claims, releases and their
// watch), in both forms of the NATS server's flow control, once the
// operator provisioned it; with the plain Permissions it may not even read
// the journal's stream.
func TestJetStreamPermissions(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		url := jsUsersServer(t, jsGatewayUsers(Permissions), nil)
		provisionAs(t, url, jsLayout)
		g := dialJetStream(t, url, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if s, err := jsjournal.Open(ctx, jsjournal.Options{Conn: g.nc, Layout: jsLayout, Gateway: "gw0"}); err == nil {
			t.Fatalf("a gateway with the plain permissions opened the journal's stream %s", s.Stream())
		}
		if v := g.violations(); len(v) == 0 {
			t.Fatal("the plain permissions: the journal's stream refused, but NATS reported no permissions violation")
		}
	})
	for _, c := range []struct {
		name  string
		flags map[string]bool
	}{
		{"flow-control-v1", nil},
		{"flow-control-v2", map[string]bool{"js_ack_fc_v2": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := jsUsersServer(t, jsGatewayUsers(jsPermissions), c.flags)
			provisionAs(t, url, jsLayout)
			exerciseJetStream(t, url, jsLayout)
		})
	}
}

var exerciseTimeout = 30 * time.Second

// markRecord is the journal's mark of snapshot id by producer pid.
func markRecord(dst []byte, pid uint16, id uint64) []byte {
	return journal.AppendRecord(dst, journal.RecMark, pid, binary.BigEndian.AppendUint64(nil, id))
}

// exerciseJetStream does on url, provisioned with l, as gateways 0 and 1,
// everything a gateway does on JetStream in replicated mode, and fails t on
// any error or permissions violation; it checks too that a gateway may not
// change or delete the stream, purge it, append as another gateway, write
// another's bucket nor read another's inboxes.
func exerciseJetStream(t *testing.T, url string, l jsjournal.Layout) {
	ctx, cancel := context.WithTimeout(context.Background(), exerciseTimeout)
	defer cancel()
	g0, g1 := dialJetStream(t, url, 0), dialJetStream(t, url, 1)
	open := func(g *jsGateway, node int) (*jsjournal.Store, *jsjournal.Claims) {
		t.Helper()
		s, err := jsjournal.Open(ctx, jsjournal.Options{Conn: g.nc, Layout: l, Node: node, Gateway: "gw" + strconv.Itoa(node), AckWait: 5 * time.Second})
		if err != nil {
			t.Fatalf("gateway %d: %v", node, err)
		}
		c, err := s.Claims(ctx, nil, nil)
		if err != nil {
			t.Fatalf("gateway %d's claims: %v", node, err)
		}
		t.Cleanup(c.Close)
		return s, c
	}
	s0, c0 := open(g0, 0)
	s1, c1 := open(g1, 1)

	// SET 0: gateway 0 claims it, appends a round, and is fenced when it
	// appends as if it had not.
	claim, err := c0.Claim(ctx, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	s0.Own(0, claim.Epoch)
	data := journal.AppendRecord(nil, 0x7f, 0, []byte("a"))
	data = markRecord(data, 0, 7)
	data = journal.AppendRecord(data, 0x7f, 0, []byte("b"))
	commit := func(s *jsjournal.Store, b journal.Batch) journal.Batch {
		t.Helper()
		bs := []journal.Batch{b}
		s.Commit(bs)
		return bs[0]
	}
	b := commit(s0, journal.Batch{Group: 0, Data: data, ExpectLast: claim.Seq})
	if b.Err != nil || b.Seq != claim.Seq+1 {
		t.Fatalf("an append after the claim: sequence %d, %v; want %d", b.Seq, b.Err, claim.Seq+1)
	}
	if b := commit(s0, journal.Batch{Group: 0, Data: data, ExpectLast: claim.Seq}); !errors.Is(b.Err, journal.ErrFenced) {
		t.Fatalf("an append expecting an older last sequence: %v; want fenced", b.Err)
	}
	if m, err := s1.Last(ctx, 0); err != nil || m.Seq != b.Seq || m.Node != 0 || m.Claim || !m.Fenced {
		t.Fatalf("the last message of SET 0, read by gateway 1: %+v, %v", m, err)
	}
	var got []string
	keep := func(r journal.Record) error { got = append(got, string(r.Payload)); return nil }
	r, err := s1.Replay(ctx, 0, jsjournal.Snapshot{}, keep)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) || r.Claims != 1 || r.Owner != 0 || r.LastSeq != b.Seq {
		t.Fatalf("replay: records %q, %+v, %v", got, r, err)
	}

	// A snapshot big enough to need the server's flow control when read,
	// then a newer one, which deletes it; then a compaction.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	if err := s0.PutSnapshot(ctx, 0, jsjournal.Snapshot{ID: 7, Seq: b.Seq, Epoch: 1, ClaimSeq: claim.Seq, Parts: []jsjournal.Part{{PID: 0, Data: big}}}); err != nil {
		t.Fatal(err)
	}
	var restored []byte
	got = nil
	r, err = s1.Load(ctx, 0, func(s jsjournal.Snapshot) error { restored = bytes.Clone(s.Parts[0].Data); return nil }, keep)
	if err != nil || !bytes.Equal(restored, big) || !slices.Equal(got, []string{"b"}) || r.Snapshot != b.Seq {
		t.Fatalf("load from the snapshot: %d bytes restored (want %d), records %q, %+v, %v", len(restored), len(big), got, r, err)
	}
	b2 := commit(s0, journal.Batch{Group: 0, Gen: 1, Data: journal.AppendRecord(markRecord(nil, 0, 8), 0x7f, 0, []byte("c")), ExpectLast: b.Seq})
	if b2.Err != nil {
		t.Fatal(b2.Err)
	}
	if err := s0.PutSnapshot(ctx, 0, jsjournal.Snapshot{ID: 8, Seq: b2.Seq, Epoch: 1, ClaimSeq: claim.Seq, Parts: []jsjournal.Part{{PID: 0, Data: []byte("state")}}}); err != nil {
		t.Fatal(err)
	}
	if snap, ok, err := s1.GetSnapshot(ctx, 0); err != nil || !ok || snap.ID != 8 || string(snap.Parts[0].Data) != "state" {
		t.Fatalf("the newest snapshot: %+v, %v, %v; want snapshot 8", snap.ID, ok, err)
	}
	b3 := commit(s0, journal.Batch{Group: 0, Gen: 0, Rollup: true, ExpectLast: b2.Seq})
	if b3.Err != nil {
		t.Fatal(b3.Err)
	}

	// Gateway 1 sees the claim in its watch and takes the SET over; its
	// claim fences gateway 0's next append; then it hands the SET back.
	for c1.Of(0) != 0 {
		if ctx.Err() != nil {
			t.Fatal("gateway 1's watch never saw gateway 0's claim")
		}
		time.Sleep(time.Millisecond)
	}
	c, err := c1.Claim(ctx, 0, 1, 0)
	if err != nil || c.Epoch != 2 {
		t.Fatalf("gateway 1 taking SET 0 over: %+v, %v", c, err)
	}
	if b := commit(s0, journal.Batch{Group: 0, Data: journal.AppendRecord(nil, 0x7f, 0, []byte("d")), ExpectLast: b3.Seq}); !errors.Is(b.Err, journal.ErrFenced) {
		t.Fatalf("gateway 0's append after gateway 1's claim: %v; want fenced", b.Err)
	}
	if err := c1.Release(ctx, 0, c.Epoch, c.Seq); err != nil {
		t.Fatal(err)
	}
	for c0.Of(0) != -1 {
		if ctx.Err() != nil {
			t.Fatal("gateway 0's watch never saw gateway 1 release SET 0")
		}
		time.Sleep(time.Millisecond)
	}
	for _, g := range []*jsGateway{g0, g1} {
		if v := g.violations(); len(v) > 0 {
			t.Fatalf("permissions violations: %v", v)
		}
	}

	// Nothing more: not changing, purging or deleting the stream, not
	// appending as gateway 1 nor writing its bucket, not hearing its inboxes.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 500*time.Millisecond) }
	refused := func(what, subject string, do func(ctx context.Context) error) {
		t.Helper()
		dctx, dcancel := short()
		defer dcancel()
		if err := do(dctx); err == nil {
			t.Errorf("gateway 0 could %s", what)
		}
		v := g0.violations()
		if len(v) == 0 || !strings.Contains(v[len(v)-1].Error(), subject) {
			t.Errorf("gateway 0 trying to %s: violations %v; want %s refused", what, v, subject)
		}
	}
	info, err := g0.js.Stream(ctx, l.Stream())
	if err != nil {
		t.Fatal(err)
	}
	refused("update the stream", "STREAM.UPDATE", func(ctx context.Context) error {
		cfg := info.CachedInfo().Config
		cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "hongbao.gw.1.>"}
		_, err := g0.js.UpdateStream(ctx, cfg)
		return err
	})
	refused("purge the stream", "STREAM.PURGE", func(ctx context.Context) error { return info.Purge(ctx) })
	refused("delete the stream", "STREAM.DELETE", func(ctx context.Context) error { return g0.js.DeleteStream(ctx, l.Stream()) })
	refused("append as gateway 1", l.RecordSubject(1, 1, 0), func(ctx context.Context) error {
		_, err := g0.js.Publish(ctx, l.RecordSubject(1, 1, 0), []byte("x"))
		return err
	})
	refused("claim as gateway 1", l.ClaimSubject(1, 1), func(ctx context.Context) error {
		_, err := g0.js.Publish(ctx, l.ClaimSubject(1, 1), nil)
		return err
	})
	refused("write gateway 1's bucket", "hongbao_snapshots_1", func(ctx context.Context) error {
		obj, err := g0.js.ObjectStore(ctx, l.Bucket(1))
		if err != nil {
			return err
		}
		_, err = obj.PutBytes(ctx, "0.0000000000000001", []byte("forged"))
		return err
	})
	g1.nc.Subscribe(InboxPrefix("hongbao", 0)+".>", func(*nats.Msg) {})
	if v1 := g1.violations(); len(v1) == 0 || !strings.Contains(v1[0].Error(), InboxPrefix("hongbao", 0)) {
		t.Errorf("gateway 1 subscribing to gateway 0's inboxes: violations %v; want refused", v1)
	}
}

// jsDeployConf is the JetStream configuration deploy/ ships, with the
// environment it reads set for one of its three servers.
func jsDeployConf(t *testing.T) string {
	t.Helper()
	deployConf(t) // the gateways' passwords
	t.Setenv("HONGBAO_NATS_NAME", "nats0")
	t.Setenv("HONGBAO_NATS_STORE", t.TempDir())
	t.Setenv("HONGBAO_NATS_ROUTE_PASSWORD", "rpw")
	t.Setenv("HONGBAO_NATS_ADMIN_PASSWORD", operatorAuth.Password)
	for i := range 3 {
		t.Setenv("HONGBAO_NATS_ROUTE"+string(rune('0'+i)), "nats-route://route:rpw@nats"+string(rune('0'+i))+".example:6222")
	}
	return filepath.Join("..", "deploy", "nats", "nats-server-js.conf")
}

// TestDeployedJetStreamPermissions: deploy/'s JetStream configuration, run
// as one server, lets the operator provision the cluster and the gateways
// do all they do in replicated mode, and no more.
func TestDeployedJetStreamPermissions(t *testing.T) {
	ns := embednats.StartTestConfigAlone(t, jsDeployConf(t))
	if nc, err := nats.Connect(ns.URL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	}
	l := jsLayout
	l.Gateways = 3 // the configuration's gateways
	provisionAs(t, ns.URL(), l)
	exerciseJetStream(t, ns.URL(), l)
}
