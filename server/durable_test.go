package server_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hbclient "github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// shakeAll shakes as c's user until the pool answers empty, and returns the
// ids and the sum of what it got.
func shakeAll(t *testing.T, c *hbclient.Client) (ids []uint64, sum uint64) {
	t.Helper()
	for {
		id, amount, err := c.Shake(t.Context())
		if errors.Is(err, hbclient.ErrEmpty) {
			return ids, sum
		}
		if err != nil {
			t.Fatalf("SHAKE: %v", err)
		}
		ids = append(ids, id)
		sum += uint64(amount)
	}
}

// money is the part of the ledger a restart keeps.
func money(st server.Stats) [10]uint64 {
	return [10]uint64{st.Shake.Got, st.Shake.GotAmount, st.Shake.Created, st.Shake.CreatedAmount, st.Shake.Pool, st.Shake.PoolAmount,
		st.Envelopes.Created, st.Envelopes.CreatedAmount, st.Envelopes.OpenedAmount, st.Envelopes.LiveAmount}
}

// TestRestartRecovers: what a server made durable is there after a restart
// with the same -data: the ledger's money, the pools (their envelopes, in
// order), the group envelopes with their drawn shares, the campaigns; no
// envelope id is handed out again.
func TestRestartRecovers(t *testing.T) {
	data := t.TempDir()
	edit := func(o *server.Options) { o.Data = data }
	a := startServer(t, edit)
	camp := a.startCampaign("shake", "rate=100000&total=300&min=1&max=100")
	a.waitCampaign(camp.ID)
	alice, bob, carol := login(t, a, 1), login(t, a, 2), login(t, a, 3)
	var first []uint64
	for range 40 { // some of the pool, not all
		s := alice.nextStamp()
		alice.send(proto.AppendShake(nil, s))
		_, id, _ := alice.answer(s).ShakeResult()
		first = append(first, id)
	}
	s := alice.nextStamp()
	alice.send(proto.AppendSend(nil, s, 1000, []uint32{2, 3}))
	status, env := alice.answer(s).SendAck()
	if status != proto.SendOK {
		t.Fatalf("SEND answered %d", status)
	}
	bob.push(proto.Envelope)
	carol.push(proto.Envelope)
	s = bob.nextStamp()
	bob.send(proto.AppendOpen(nil, s, env))
	if status, _, _ := bob.answer(s).OpenResult(); status != proto.OpenOK {
		t.Fatalf("OPEN answered %d", status)
	}
	before := a.stats()
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	// The shutdown's snapshot holds it all: the journal before it is gone.
	snaps, _ := filepath.Glob(filepath.Join(data, "snapshots", "*.snapshot"))
	segs, _ := filepath.Glob(filepath.Join(data, "journal", "*.journal"))
	if len(snaps) != 1 || len(segs) != 1 {
		t.Fatalf("after the shutdown: snapshots %v, journal segments %v; want one of each", snaps, segs)
	}

	b := startServer(t, edit)
	after := b.stats()
	if money(after) != money(before) {
		t.Fatalf("after the restart the ledger's money is %v; before it was %v", money(after), money(before))
	}
	if err := after.Check(); err != nil {
		t.Fatal(err)
	}
	cs := b.campaigns()
	if len(cs) != 1 || cs[0].ID != camp.ID || cs[0].State != "finished" || cs[0].Dealt != 300 {
		t.Fatalf("campaigns after the restart: %+v; want campaign %d finished with 300 dealt", cs, camp.ID)
	}
	if again := b.startCampaign("shake", "rate=100000&total=10&min=1&max=1"); again.ID == camp.ID {
		t.Fatalf("a new campaign got id %d again", again.ID)
	} else {
		b.waitCampaign(again.ID)
	}
	seen := map[uint64]bool{}
	for _, id := range first {
		seen[id] = true
	}
	var ids []uint64
	for u := range uint32(4) { // a user of each SET: each SET has its pool
		more, _ := shakeAll(t, appLogin(t, b, 10+u))
		ids = append(ids, more...)
	}
	if len(ids) != 300-40+10 {
		t.Fatalf("%d envelopes shaken after the restart; want the %d left and 10 new", len(ids), 300-40)
	}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("envelope %#x handed out before and after the restart", id)
		}
		seen[id] = true
	}
	// Bob's share stays his; carol's is still there to open.
	bob, carol = login(t, b, 2), login(t, b, 3)
	s = bob.nextStamp()
	bob.send(proto.AppendOpen(nil, s, env))
	if status, _, _ := bob.answer(s).OpenResult(); status != proto.OpenAlready {
		t.Fatalf("bob's OPEN again after the restart answered %d; want %d (already)", status, proto.OpenAlready)
	}
	s = carol.nextStamp()
	carol.send(proto.AppendOpen(nil, s, env))
	if status, _, _ := carol.answer(s).OpenResult(); status != proto.OpenOK {
		t.Fatalf("carol's OPEN after the restart answered %d", status)
	}
	// A new group envelope's id is not one handed out before.
	alice = login(t, b, 1)
	s = alice.nextStamp()
	alice.send(proto.AppendSend(nil, s, 1000, []uint32{2, 3}))
	if _, env2 := alice.answer(s).SendAck(); env2 == env {
		t.Fatalf("envelope id %#x handed out again after the restart", env)
	}
}

// syncSwitch fails every Sync once off is set.
type syncSwitch struct {
	journal.File
	off *atomic.Bool
}

func (f syncSwitch) Sync() error {
	if f.off.Load() {
		return errors.New("injected: EIO")
	}
	return f.File.Sync()
}

// TestJournalFailure: once a sync fails no money is handed out — SHAKE
// answers 2, SEND and OPEN overloaded — /healthz says why, and what was
// never durable is never answered as got.
func TestJournalFailure(t *testing.T) {
	var off atomic.Bool
	ts := startServer(t, func(o *server.Options) {
		o.JournalCreate = func(path string) (journal.File, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
			return syncSwitch{f, &off}, err
		}
	})
	ts.waitCampaign(ts.startCampaign("shake", "rate=100000&total=100&min=1&max=100").ID)
	ctx := t.Context()
	alice, bob := appLogin(t, ts, 1), appLogin(t, ts, 2)
	env, err := alice.Send(ctx, 100, []uint32{2})
	if err != nil {
		t.Fatalf("SEND: %v", err)
	}
	if p := <-bob.Pushes(); p.Envelope != env {
		t.Fatalf("pushed %+v; want envelope %#x", p, env)
	}
	if code, _ := ts.do(http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz %d before the failure", code)
	}
	off.Store(true)
	got := ts.stats().Shake.GotAmount
	for range 5 {
		if _, _, err := alice.Shake(ctx); !errors.Is(err, hbclient.ErrOverloaded) {
			t.Fatalf("SHAKE after the failure: %v; want SHAKE_RESULT %d", err, proto.ShakeOverloaded)
		}
	}
	if _, err := alice.Send(ctx, 100, []uint32{2}); !errors.Is(err, hbclient.ErrOverloaded) {
		t.Fatalf("SEND after the failure: %v; want SEND_ACK %d", err, proto.SendOverloaded)
	}
	if _, err := bob.Open(ctx, env); !errors.Is(err, hbclient.ErrOverloaded) {
		t.Fatalf("OPEN after the failure: %v; want OPEN_RESULT %d", err, proto.OpenOverloaded)
	}
	code, body := ts.do(http.MethodGet, "/healthz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "journal") || !strings.Contains(string(body), "injected") {
		t.Fatalf("/healthz after the failure: %d %s; want 503 naming the journal's error", code, body)
	}
	st := ts.stats()
	if st.Shake.GotAmount != got {
		t.Fatalf("got_amount went from %d to %d after the failure", got, st.Shake.GotAmount)
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	if code, _ := ts.do(http.MethodPost, "/campaigns/shake?rate=10&total=10&min=1&max=2", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a campaign started after the failure: %d; want 503", code)
	}
	requireJournalFailedAtShutdown(t, ts)
}

// syncGate holds every Sync until the test lets it go.
type syncGate struct {
	journal.File
	held    *atomic.Bool
	release chan struct{}
}

func (f syncGate) Sync() error {
	if f.held.Load() {
		<-f.release
	}
	return f.File.Sync()
}

// TestMoneyWaitsForDurability: a SHAKE_RESULT 1 leaves only once its record
// is synced, while answers about no money (PONG, an empty SHAKE) leave at
// once; the held answers all go out once the sync is done.
func TestMoneyWaitsForDurability(t *testing.T) {
	var held atomic.Bool
	release := make(chan struct{})
	ts := startServer(t, func(o *server.Options) {
		o.Sets = 1
		o.JournalCreate = func(path string) (journal.File, error) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
			return syncGate{f, &held, release}, err
		}
	})
	var once sync.Once
	open := func() { once.Do(func() { held.Store(false); close(release) }) }
	t.Cleanup(open) // before the server's shutdown, which waits for the last sync
	ts.waitCampaign(ts.startCampaign("shake", "rate=100000&total=3&min=1&max=100").ID)
	alice := login(t, ts, 1)
	held.Store(true)
	var b []byte
	for i := range 3 {
		b = proto.AppendShake(b, uint64(100+i))
	}
	alice.send(b)
	alice.ping() // answered while the SHAKEs wait
	if len(alice.early) > 0 {
		t.Fatalf("%d SHAKEs answered before their records were synced", len(alice.early))
	}
	if f, err := alice.c.Next(100 * time.Millisecond); err == nil {
		t.Fatalf("%s before the SHAKEs' records were synced", describe(f))
	}
	open()
	for i := range 3 {
		if status, _, _ := alice.answer(uint64(100 + i)).ShakeResult(); status != proto.ShakeGot {
			t.Fatalf("SHAKE %d answered %d after the sync", i, status)
		}
	}
	s := alice.nextStamp()
	alice.send(proto.AppendShake(nil, s))
	if status, _, _ := alice.answer(s).ShakeResult(); status != proto.ShakeNothing {
		t.Fatalf("SHAKE of an empty pool answered %d", status)
	}
}

// TestJournalOff: with -journal off money is answered at once and nothing is
// written under -data: a restart starts empty.
func TestJournalOff(t *testing.T) {
	data := t.TempDir()
	edit := func(o *server.Options) { o.Data, o.Journal = data, "off" }
	a := startServer(t, edit)
	a.waitCampaign(a.startCampaign("shake", "rate=100000&total=10&min=1&max=100").ID)
	if _, sum := shakeAll(t, appLogin(t, a, 1)); sum == 0 {
		t.Fatal("nothing shaken")
	}
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Fatalf("-journal off wrote %v under -data", ents)
	}
	if st := startServer(t, edit).stats(); st.Shake.Created != 0 {
		t.Fatalf("-journal off: %d envelopes after a restart; want none", st.Shake.Created)
	}
}

// TestRestartKeepsEndedCampaigns: the SETs prune the tallies of ended
// campaigns at a snapshot; the runner's part keeps their figures, so a
// finished and a cancelled campaign come back with what they dealt, restart
// after restart, and the money stays whole.
func TestRestartKeepsEndedCampaigns(t *testing.T) {
	data := t.TempDir()
	edit := func(o *server.Options) { o.Data = data }
	a := startServer(t, edit)
	done := a.startCampaign("shake", "rate=100000&total=300&min=1&max=100")
	a.waitCampaign(done.ID)
	slow := a.startCampaign("send", "rate=50&total=1000000&recipients=1&min=1&max=100")
	login(t, a, 1) // a recipient online, so that the send campaign's envelopes are made
	time.Sleep(300 * time.Millisecond)
	if code, body := a.do(http.MethodDelete, "/campaigns/"+strconv.Itoa(slow.ID), ""); code != http.StatusOK {
		t.Fatalf("DELETE /campaigns/%d: %d %s", slow.ID, code, body)
	}
	before, stats := a.campaigns(), a.stats()
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // the second start loads a snapshot written from recovered state
		b := startServer(t, edit)
		after := b.campaigns()
		if len(after) != len(before) {
			t.Fatalf("round %d: campaigns after the restart %+v; before %+v", round, after, before)
		}
		for i := range before {
			x, y := before[i], after[i]
			if x.ID != y.ID || x.State != y.State || x.Dealt != y.Dealt || x.Amount != y.Amount {
				t.Fatalf("round %d: campaign after the restart %+v; before %+v", round, y, x)
			}
		}
		if money(b.stats()) != money(stats) {
			t.Fatalf("round %d: the ledger's money %v; before %v", round, money(b.stats()), money(stats))
		}
		if err := b.shutdown(); err != nil {
			t.Fatal(err)
		}
	}
}
