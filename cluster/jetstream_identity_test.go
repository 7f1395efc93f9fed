package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"hongbao/internal/embednats"
	"hongbao/journal"
	"hongbao/jsjournal"
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
	nc, err := ConnectJetStream(url, "hongbao", node, gatewayAuth(node))
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

func jsGatewayUsers(perms func(string, int) ([]string, []string)) []embednats.User {
	var users []embednats.User
	for node := range 2 {
		pub, sub := perms("hongbao", node)
		a := gatewayAuth(node)
		users = append(users, embednats.User{Name: a.User, Password: a.Password, Publish: pub, Subscribe: sub})
	}
	return users
}

// TestJetStreamPermissions: with exactly JetStreamPermissions a gateway
// does all it does on JetStream (the journal's stream, its appends, fences,
// replays and snapshots; the ownership records, their claims, releases and
// watch), in both forms of the NATS server's flow control; with the plain
// Permissions it may not create the journal's stream. Each permission is
// needed by one of the steps: without it, one fails.
func TestJetStreamPermissions(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		url := jsUsersServer(t, jsGatewayUsers(Permissions), nil)
		g := dialJetStream(t, url, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if s, err := jsjournal.Open(ctx, jsjournal.Options{Conn: g.nc, Gateway: "gw0"}); err == nil {
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
			exerciseJetStream(t, jsUsersServer(t, jsGatewayUsers(JetStreamPermissions), c.flags))
		})
	}
}

var exerciseTimeout = 30 * time.Second

// markRecord is the journal's mark of snapshot id by producer pid.
func markRecord(dst []byte, pid uint16, id uint64) []byte {
	return journal.AppendRecord(dst, journal.RecMark, pid, binary.BigEndian.AppendUint64(nil, id))
}

// exerciseJetStream does on url, as gateways 0 and 1, everything a gateway
// does on JetStream in replicated mode, and fails t on any error or
// permissions violation; it checks too that a gateway may not delete the
// journal's stream nor read another gateway's inboxes.
func exerciseJetStream(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), exerciseTimeout)
	defer cancel()
	g0, g1 := dialJetStream(t, url, 0), dialJetStream(t, url, 1)
	open := func(g *jsGateway, name string) *jsjournal.Store {
		t.Helper()
		s, err := jsjournal.Open(ctx, jsjournal.Options{Conn: g.nc, Gateway: name, AckWait: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return s
	}
	s0 := open(g0, "gw0")
	s1 := open(g1, "gw1") // the stream and the bucket there already: updated

	// SET 0: gateway 0 claims it, appends a round, and is fenced when it
	// appends as if it had not.
	claim, err := s0.AppendClaim(ctx, 0, "gw0", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := journal.AppendRecord(nil, 0x7f, 0, []byte("a"))
	data = markRecord(data, 0, 7)
	data = journal.AppendRecord(data, 0x7f, 0, []byte("b"))
	commit := func(s *jsjournal.Store, expect uint64, data []byte) journal.Batch {
		t.Helper()
		bs := []journal.Batch{{Group: 0, Data: data, ExpectLast: expect}}
		s.Commit(bs)
		return bs[0]
	}
	b := commit(s0, claim, data)
	if b.Err != nil || b.Seq != claim+1 {
		t.Fatalf("an append after the claim: sequence %d, %v; want %d", b.Seq, b.Err, claim+1)
	}
	if b := commit(s0, claim, data); !errors.Is(b.Err, journal.ErrFenced) {
		t.Fatalf("an append expecting an older last sequence: %v; want fenced", b.Err)
	}
	if l, err := s1.Last(ctx, 0); err != nil || l.Seq != b.Seq || l.Gateway != "gw0" || l.Claim {
		t.Fatalf("the last message of SET 0, read by gateway 1: %+v, %v", l, err)
	}
	var got []string
	keep := func(r journal.Record) error { got = append(got, string(r.Payload)); return nil }
	r, err := s1.Replay(ctx, 0, jsjournal.Snapshot{}, keep)
	if err != nil || !slices.Equal(got, []string{"a", "b"}) || r.Claims != 1 || r.Owner != "gw0" || r.LastSeq != b.Seq {
		t.Fatalf("replay: records %q, %+v, %v", got, r, err)
	}

	// A snapshot big enough to need the server's flow control when read,
	// then a newer one, which deletes it.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	if err := s0.PutSnapshot(ctx, 0, jsjournal.Snapshot{ID: 7, Seq: b.Seq, Epoch: 1, Parts: []jsjournal.Part{{PID: 0, Data: big}}}); err != nil {
		t.Fatal(err)
	}
	var restored []byte
	got = nil
	r, err = s1.Load(ctx, 0, func(s jsjournal.Snapshot) error { restored = bytes.Clone(s.Parts[0].Data); return nil }, keep)
	if err != nil || !bytes.Equal(restored, big) || !slices.Equal(got, []string{"b"}) || r.Snapshot != b.Seq {
		t.Fatalf("load from the snapshot: %d bytes restored (want %d), records %q, %+v, %v", len(restored), len(big), got, r, err)
	}
	b2 := commit(s0, b.Seq, journal.AppendRecord(markRecord(nil, 0, 8), 0x7f, 0, []byte("c")))
	if b2.Err != nil {
		t.Fatal(b2.Err)
	}
	if err := s0.PutSnapshot(ctx, 0, jsjournal.Snapshot{ID: 8, Seq: b2.Seq, Epoch: 1, Parts: []jsjournal.Part{{PID: 0, Data: []byte("state")}}}); err != nil {
		t.Fatal(err)
	}
	if snap, ok, err := s1.GetSnapshot(ctx, 0); err != nil || !ok || snap.ID != 8 || string(snap.Parts[0].Data) != "state" {
		t.Fatalf("the newest snapshot: %+v, %v, %v; want snapshot 8", snap.ID, ok, err)
	}

	// The ownership records: gateway 0 claims SET 0, gateway 1 sees it in
	// its watch and takes it over; gateway 0 sees that, and its stale claim
	// loses.
	changes := make(chan Claim, 16)
	o0, err := OpenOwners(ctx, g0.js, "hongbao_owners", 4, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	o1, err := OpenOwners(ctx, g1.js, "hongbao_owners", 4, 1, func(set int, was, now Claim) { changes <- now })
	if err != nil {
		o0.Close()
		t.Fatal(err)
	}
	defer o1.Close() // Close is idempotent: the watches stop below, their consumers deleted
	defer o0.Close()
	if _, err := o0.Claim(ctx, 0, 0, 0, "gw0"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-changes:
		if c.Node != 0 || c.Epoch != 1 {
			t.Fatalf("gateway 1's watch saw %+v; want gateway 0's claim at epoch 1", c)
		}
	case <-ctx.Done():
		t.Fatal("gateway 1's watch never saw gateway 0's claim")
	}
	_, rev := o1.Get(0)
	if c, err := o1.Claim(ctx, 0, rev, 1, "gw1"); err != nil || c.Epoch != 2 {
		t.Fatalf("gateway 1 taking SET 0 over: %+v, %v", c, err)
	}
	for o0.Of(0) != 1 {
		if ctx.Err() != nil {
			t.Fatal("gateway 0's watch never saw gateway 1's claim")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := o0.Claim(ctx, 0, rev, 0, "gw0"); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("a claim from a revision replaced: %v; want ErrClaimLost", err)
	}
	// ...and its claim in the journal fences gateway 0's next append.
	l, err := s1.Last(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.AppendClaim(ctx, 0, "gw1", 2, l.Seq); err != nil {
		t.Fatal(err)
	}
	if b := commit(s0, b2.Seq, journal.AppendRecord(nil, 0x7f, 0, []byte("d"))); !errors.Is(b.Err, journal.ErrFenced) {
		t.Fatalf("gateway 0's append after gateway 1's claim: %v; want fenced", b.Err)
	}
	// A graceful stop hands the SET back.
	if err := o1.Release(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	for o0.Of(0) != -1 {
		if ctx.Err() != nil {
			t.Fatal("gateway 0's watch never saw gateway 1 release SET 0")
		}
		time.Sleep(time.Millisecond)
	}
	// Binding to the streams, as reading their state does.
	if _, err := g0.js.Stream(ctx, s0.Stream()); err != nil {
		t.Fatal(err)
	}
	kv, err := g0.js.KeyValue(ctx, "hongbao_owners")
	if err != nil {
		t.Fatal(err)
	}
	// A watch that has carried more than the server's flow-control window
	// (2 MiB outstanding) goes on only if its flow control is answered.
	pad := bytes.Repeat([]byte("x"), 512<<10)
	for range 6 {
		if _, err := kv.Put(ctx, "set.3", pad); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o0.Claim(ctx, 2, 0, 0, "gw0"); err != nil {
		t.Fatal(err)
	}
	for o1.Of(2) != 0 {
		if ctx.Err() != nil {
			t.Fatal("gateway 1's watch stopped following after 3 MiB")
		}
		time.Sleep(time.Millisecond)
	}
	o0.Close()
	o1.Close()
	if _, err := g0.js.ObjectStore(ctx, "hongbao_snapshots"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*jsGateway{g0, g1} {
		if v := g.violations(); len(v) > 0 {
			t.Fatalf("permissions violations: %v", v)
		}
	}

	// Nothing more: not deleting the stream, not hearing another's inboxes.
	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer dcancel()
	if err := g0.js.DeleteStream(dctx, s0.Stream()); err == nil {
		t.Error("a gateway deleted the journal's stream")
	}
	g1.nc.Subscribe(InboxPrefix("hongbao", 0)+".>", func(*nats.Msg) {})
	v0, v1 := g0.violations(), g1.violations()
	if len(v0) == 0 || !strings.Contains(v0[0].Error(), "STREAM.DELETE") {
		t.Errorf("deleting the journal's stream: violations %v; want refused", v0)
	}
	if len(v1) == 0 || !strings.Contains(v1[0].Error(), InboxPrefix("hongbao", 0)) {
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
	for i := range 3 {
		t.Setenv("HONGBAO_NATS_ROUTE"+string(rune('0'+i)), "nats-route://route:rpw@nats"+string(rune('0'+i))+".example:6222")
	}
	return filepath.Join("..", "deploy", "nats", "nats-server-js.conf")
}

// TestDeployedJetStreamPermissions: deploy/'s JetStream configuration, run
// as one server, lets the gateways do all they do in replicated mode.
func TestDeployedJetStreamPermissions(t *testing.T) {
	ns := embednats.StartTestConfigAlone(t, jsDeployConf(t))
	if nc, err := nats.Connect(ns.URL()); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was let in")
	}
	exerciseJetStream(t, ns.URL())
}
