package jsjournal

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// TestOpenChecksLayout: a gateway opens only what an operator provisioned,
// as it was provisioned: a missing stream, and a stream or bucket changed
// since (a republish rule, another number of SETs, a limit that drops
// records, another replica count), are refused, each difference named;
// Provision without update refuses them too, and with update mends what it
// may — never the number of SETs.
func TestOpenChecksLayout(t *testing.T) {
	ns := startJS(t)
	ctx := ctxT(t)
	nc := dial(t, ns.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	open := func() error {
		_, err := Open(ctx, Options{Conn: nc, Layout: testLayout, Node: 0, Gateway: "gw-0"})
		return err
	}
	if err := open(); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "jsadmin provision") {
		t.Fatalf("open with nothing provisioned: %v; want the layout's missing stream named", err)
	}
	did, err := Provision(ctx, js, testLayout, false)
	if err != nil || len(did) != 1+testLayout.Gateways {
		t.Fatalf("provision: %q, %v; want the stream and %d buckets created", did, err, testLayout.Gateways)
	}
	if did, err := Provision(ctx, js, testLayout, false); err != nil || len(did) != 0 {
		t.Fatalf("provision again: %q, %v; want nothing to do", did, err)
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, testLayout.Stream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "hongbao.gw.1.>"}
	cfg.MaxAge = time.Hour
	cfg.Metadata[metaSets] = "9"
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	err = open()
	for _, want := range []string{"republish", "limits", metaSets} {
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), want) {
			t.Errorf("open of a stream changed: %v; want %q named", err, want)
		}
	}
	if _, err := Provision(ctx, js, testLayout, false); !errors.Is(err, ErrLayout) {
		t.Errorf("provision without update over a changed stream: %v; want refused", err)
	}
	if _, err := Provision(ctx, js, testLayout, true); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("provision -update of a stream of another number of SETs: %v; want refused", err)
	}
	cfg.Metadata[metaSets] = "64"
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if did, err := Provision(ctx, js, testLayout, true); err != nil || len(did) != 1 {
		t.Fatalf("provision -update: %q, %v; want the stream mended", did, err)
	}
	if err := open(); err != nil {
		t.Fatalf("open once mended: %v", err)
	}
}

// TestForgeriesFenceNobody: while gateway 0 owns a SET, gateway 2 — whose
// credentials may publish on its own subjects only — appends to the SET
// without the expected last sequence, and with it but as a round of its
// own, and claims it out of turn. Gateway 0's next rounds are stored all
// the same (its writer finds nothing that fences it after its last, only
// forgeries, counted), and a replay hands over gateway 0's records alone.
func TestForgeriesFenceNobody(t *testing.T) {
	ns := startJS(t)
	a, x := openStore(t, ns.URL(), 0, nil), openStore(t, ns.URL(), 2, nil)
	ctx := ctxT(t)
	const set = 2
	w := newWriter(t, a, []spec{{set, 1}}, func(o *journal.Options) {
		o.OnFenced = func(g int, err error) { t.Errorf("group %d fenced: %v", g, err) }
		o.OnGroupFailed = func(g int, err error) { t.Errorf("group %d failed: %v", g, err) }
	})
	if err := w.j.Reopen(set, claimed(t, a, set, 1)); err != nil {
		t.Fatal(err)
	}
	p := w.ps[set][0]
	write := func(payload string) {
		t.Helper()
		if err := p.Wait(p.Append(recTest, []byte(payload))); err != nil {
			t.Fatalf("gateway 0's round %q: %v", payload, err)
		}
	}
	forge := func(fenced bool) {
		t.Helper()
		m := x.message(&journal.Batch{Group: set, Data: journal.AppendRecord(nil, recTest, 5, []byte("forged"))})
		var opts []jetstream.PublishOpt
		if fenced {
			last, err := x.Last(ctx, set)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(last.Seq, x.l.SetFilter(set)))
		}
		if _, err := x.js.PublishMsg(ctx, m, opts...); err != nil {
			t.Fatal(err)
		}
	}
	write("a1")
	forge(false)
	write("a2")
	forge(true)
	write("a3")
	last, err := x.Last(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.AppendClaim(ctx, set, 7, last.Seq); err != nil { // epoch 2 is next
		t.Fatal(err)
	}
	write("a4")
	if n := a.Refused(RefusedUnfenced) + a.Refused(RefusedNotOwner) + a.Refused(RefusedClaim); n != 3 {
		t.Errorf("gateway 0's writer refused %d forgeries past its last; want 3", n)
	}
	var got []rec
	r, err := a.Replay(ctx, set, Snapshot{}, collect(&got))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].payload != "a1" || got[3].payload != "a4" || r.Owner != 0 || r.Dropped != 3 {
		t.Fatalf("replay: %v, %+v; want a1 to a4, gateway 0 still the owner, 3 forgeries dropped", got, r)
	}
}

// TestSnapshotTrust: a snapshot is loaded only if its writer owned the SET
// from the claim it names to its first mark. Gateway 2 puts in its own
// bucket a newer snapshot of gateway 0's SET, naming itself the owner, and
// one naming gateway 0's claim: both are refused and counted, and the load
// takes gateway 0's own.
func TestSnapshotTrust(t *testing.T) {
	ns := startJS(t)
	a, x := openStore(t, ns.URL(), 0, nil), openStore(t, ns.URL(), 2, nil)
	ctx := ctxT(t)
	const set = 4
	w := newWriter(t, a, []spec{{set, 1}}, nil)
	claim := claimed(t, a, set, 1)
	if err := w.j.Reopen(set, claim); err != nil {
		t.Fatal(err)
	}
	p := w.ps[set][0]
	if err := p.Wait(p.Mark(11)); err != nil {
		t.Fatal(err)
	}
	seq, _ := w.j.MarkSeq(p.ID(), 11)
	if err := a.PutSnapshot(ctx, set, Snapshot{ID: 11, Seq: seq, Epoch: 1, ClaimSeq: claim, Parts: []Part{{PID: p.ID(), Data: []byte("real")}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(recTest, []byte("after"))); err != nil {
		t.Fatal(err)
	}
	last, err := a.Last(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	// Gateway 2's objects, newer than the real one: one naming itself the
	// owner at gateway 0's claim, one naming gateway 0.
	for _, f := range []struct {
		owner int
		seq   uint64
	}{{2, last.Seq}, {0, last.Seq + 5}} {
		data := encodeSnapshot(set, Snapshot{ID: 99, Seq: f.seq, Epoch: 1, ClaimSeq: claim, Owner: f.owner, Parts: []Part{{PID: p.ID(), Data: []byte("forged")}}})
		if _, err := x.obj.PutBytes(ctx, objectName(set, f.seq), data); err != nil {
			t.Fatal(err)
		}
	}
	other := openStore(t, ns.URL(), 1, nil)
	var parts string
	r, err := other.Load(ctx, set, func(sn Snapshot) error { parts = string(sn.Parts[0].Data); return nil }, func(journal.Record) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if parts != "real" || r.Snapshot != seq || r.Owner != 0 {
		t.Fatalf("loaded snapshot %q from %d, owner %d; want gateway 0's real one from %d", parts, r.Snapshot, r.Owner, seq)
	}
	if n := other.Refused(RefusedSnapshot); n < 2 {
		t.Fatalf("%d snapshots refused; want both forgeries", n)
	}
}

// TestClaimsFollowOwnership: the claims watch of every gateway sees a
// claim, a takeover one epoch later and a release by the owner; a claim out
// of turn and a release by another gateway are refused and counted; Claim
// reads the epoch from the watch and fences the old owner.
func TestClaimsFollowOwnership(t *testing.T) {
	ns := startJS(t)
	a, b := openStore(t, ns.URL(), 0, nil), openStore(t, ns.URL(), 1, nil)
	ctx := ctxT(t)
	ca, err := a.Claims(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	changes := make(chan Claim, 16)
	cb, err := b.Claims(ctx, nil, func(set int, was, now Claim) { changes <- now })
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	wait := func(what string, c *Claims, set, node int) {
		t.Helper()
		for c.Of(set) != node {
			if ctx.Err() != nil {
				t.Fatalf("%s: SET %d's owner %d; want %d", what, set, c.Of(set), node)
			}
			time.Sleep(time.Millisecond)
		}
	}
	c, err := ca.Claim(ctx, 0, 0, 0)
	if err != nil || c.Epoch != 1 || c.Node != 0 {
		t.Fatalf("gateway 0 claims SET 0: %+v, %v", c, err)
	}
	select {
	case now := <-changes:
		if now.Node != 0 || now.Epoch != 1 {
			t.Fatalf("gateway 1's watch saw %+v; want gateway 0's claim at epoch 1", now)
		}
	case <-ctx.Done():
		t.Fatal("gateway 1's watch never saw gateway 0's claim")
	}
	// Out of turn, and a release of a SET gateway 1 does not own: refused.
	last, _ := b.Last(ctx, 0)
	if _, err := b.AppendClaim(ctx, 0, 5, last.Seq); err != nil {
		t.Fatal(err)
	}
	last, _ = b.Last(ctx, 0)
	if _, err := b.AppendRelease(ctx, 0, 1, last.Seq); err != nil {
		t.Fatal(err)
	}
	for ca.s.Refused(RefusedClaim) < 2 {
		if ctx.Err() != nil {
			t.Fatalf("%d claims refused; want 2", ca.s.Refused(RefusedClaim))
		}
		time.Sleep(time.Millisecond)
	}
	if ca.Of(0) != 0 || ca.Get(0).Epoch != 1 {
		t.Fatalf("after the refusals: %+v; want gateway 0's at epoch 1", ca.Get(0))
	}
	// Gateway 1 takes it over: epoch 2, after everything there.
	c, err = cb.Claim(ctx, 0, 1, 0)
	if err != nil || c.Epoch != 2 || c.Node != 1 {
		t.Fatalf("gateway 1 takes SET 0 over: %+v, %v", c, err)
	}
	wait("gateway 0's watch after the takeover", ca, 0, 1)
	// A claim from the owner gateway 1 replaced, made as if it had not —
	// two survivors that judged the same owner dead: it takes nothing.
	if c, err := ca.Claim(ctx, 0, 1, 0); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("a claim from epoch 1 after gateway 1's at epoch 2: %+v, %v; want ErrClaimLost", c, err)
	}
	if ca.Former(0) != 0 {
		t.Fatalf("SET 0's former owner %d; want 0", ca.Former(0))
	}
	// A release by the owner leaves it without one.
	if err := cb.Release(ctx, 0, 2, c.Seq); err != nil {
		t.Fatal(err)
	}
	wait("the release", ca, 0, -1)
	if _, err := ca.Claim(ctx, 0, 2, c.Seq); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("a claim expecting a message before the release: %v; want ErrClaimLost", err)
	}
	if c, err := ca.Claim(ctx, 0, 2, 0); err != nil || c.Epoch != 3 {
		t.Fatalf("gateway 0 claims it again: %+v, %v; want epoch 3", c, err)
	}
}
