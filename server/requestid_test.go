package server_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// idAnswers are the answers to one SHAKE, SEND and OPEN with request ids,
// each as its frame's body: a retry must get the same bytes.
type idAnswers struct{ shake, send, open string }

// TestRequestIDs: a SHAKE, SEND and OPEN that carry a request id are
// answered the same, byte for byte, when retried with that id on a new
// connection and after a restart — one envelope taken, one envelope
// created, one share drawn; an id outside the window is refused and does
// nothing; an id given to a SEND cannot name an OPEN.
func TestRequestIDs(t *testing.T) {
	data := t.TempDir()
	edit := func(o *server.Options) { o.Data = data }
	a := startServer(t, edit)
	a.waitCampaign(a.startCampaign("shake", "rate=100000&total=40&min=1&max=100").ID)
	now := time.Now().Unix()
	shakeID, sendID, openID := proto.NewRequestID(now, 1), proto.NewRequestID(now, 2), proto.NewRequestID(now, 1)

	ask := func(ts *testServer) idAnswers {
		t.Helper()
		alice, bob := login(t, ts, 1), login(t, ts, 2) // each replaces the connection before it
		var got idAnswers
		s := alice.nextStamp()
		alice.send(proto.AppendShakeID(nil, s, shakeID))
		got.shake = string(alice.answer(s).Body)
		s = alice.nextStamp()
		alice.send(proto.AppendSendID(nil, s, 500, []uint32{2, 3}, sendID))
		f := alice.answer(s)
		got.send = string(f.Body)
		_, env := f.SendAck()
		s = bob.nextStamp()
		bob.send(proto.AppendOpenID(nil, s, env, openID))
		got.open = string(bob.answer(s).Body)
		return got
	}
	first := ask(a)
	if status, _, _ := parse(proto.ShakeResult, first.shake).ShakeResult(); status != proto.ShakeGot {
		t.Fatalf("the first SHAKE answered %d; want %d", status, proto.ShakeGot)
	}
	if status, _ := parse(proto.SendAck, first.send).SendAck(); status != proto.SendOK {
		t.Fatalf("the first SEND answered %d", status)
	}
	if status, _, _ := parse(proto.OpenResult, first.open).OpenResult(); status != proto.OpenOK {
		t.Fatalf("the first OPEN answered %d", status)
	}
	before := a.stats()
	if again := ask(a); again != first {
		t.Fatalf("retried with the same ids: %x; first %x", again, first)
	}
	after := a.stats()
	if after.Shake.Got != before.Shake.Got || after.Shake.Pool != before.Shake.Pool ||
		after.Envelopes.Created != before.Envelopes.Created || after.Envelopes.Opened != before.Envelopes.Opened {
		t.Fatalf("the retries moved money: before %+v %+v, after %+v %+v", before.Shake, before.Envelopes, after.Shake, after.Envelopes)
	}
	for _, m := range []string{`hongbao_request_replays_total{type="shake"} 1`, `hongbao_request_replays_total{type="send"} 1`,
		`hongbao_request_replays_total{type="open"} 1`, "hongbao_request_ids 3"} {
		if !strings.Contains(a.metrics(), m+"\n") {
			t.Errorf("/metrics has no %q", m)
		}
	}

	// An OPEN of the same envelope without the id is told the share as
	// "already"; the SEND's id cannot name an OPEN.
	_, env := parse(proto.SendAck, first.send).SendAck()
	_, _, share := parse(proto.OpenResult, first.open).OpenResult()
	bob := login(t, a, 2)
	s := bob.nextStamp()
	bob.send(proto.AppendOpen(nil, s, env))
	if status, _, got := bob.answer(s).OpenResult(); status != proto.OpenAlready || got != share {
		t.Errorf("OPEN without the id: status %d, share %d; want %d, %d", status, got, proto.OpenAlready, share)
	}
	carol := login(t, a, 3)
	s = carol.nextStamp()
	carol.send(proto.AppendOpenID(nil, s, env, sendID))
	if status, _, _ := carol.answer(s).OpenResult(); status != proto.OpenOK {
		t.Errorf("carol's OPEN with an id alice gave her SEND: status %d; want %d (ids are the user's)", status, proto.OpenOK)
	}

	// bob's OPEN of another envelope of the same SET with his first OPEN's
	// id: refused, nothing drawn.
	alice := login(t, a, 1)
	s = alice.nextStamp()
	alice.send(proto.AppendSend(nil, s, 300, []uint32{2}))
	_, env2 := alice.answer(s).SendAck()
	s = bob.nextStamp()
	bob.send(proto.AppendOpenID(nil, s, env2, openID))
	if status, got, amount := bob.answer(s).OpenResult(); status != proto.OpenExpired || got != env2 || amount != 0 {
		t.Errorf("bob's OPEN of another envelope with his first OPEN's id: status %d, %#x, %d fen; want %d (the id named another request)", status, got, amount, proto.OpenExpired)
	}

	// Outside the window: refused, nothing taken.
	pool := a.stats().Shake.Pool
	for _, old := range []uint64{proto.NewRequestID(now-int64(stagesWindow/time.Second)-1, 9), proto.NewRequestID(now+int64(stagesWindow/time.Second)+60, 9)} {
		s = alice.nextStamp()
		alice.send(proto.AppendShakeID(nil, s, old))
		if status, _, _ := alice.answer(s).ShakeResult(); status != proto.ShakeExpired {
			t.Errorf("a SHAKE with id %#x: status %d; want %d (expired)", old, status, proto.ShakeExpired)
		}
	}
	if p := a.stats().Shake.Pool; p != pool {
		t.Errorf("the expired SHAKEs took %d envelopes", pool-p)
	}

	// After a restart the answers are the same.
	if err := a.shutdown(); err != nil {
		t.Fatal(err)
	}
	b := startServer(t, edit)
	if again := ask(b); again != first {
		t.Fatalf("after a restart: %x; first %x", again, first)
	}
	st := b.stats()
	if err := st.Check(); err != nil {
		t.Error(err)
	}
}

// stagesWindow is the server's default -request-window.
const stagesWindow = 10 * time.Minute

// parse decodes an answer body of type typ, as its frame's.
func parse(typ proto.Type, body string) proto.Frame {
	return proto.Frame{Type: typ, Body: []byte(body)}
}

// metrics returns the text of GET /metrics.
func (ts *testServer) metrics() string {
	ts.t.Helper()
	code, body := ts.do("GET", "/metrics", ts.token)
	if code != 200 {
		ts.t.Fatalf("GET /metrics: %d", code)
	}
	return string(body)
}

// TestKeptPushesSurviveACrash: the ENVELOPE pushes kept for a user who was
// offline are the SET's state — one kept before a snapshot (in the split
// stage's part), one after it (in the journal's records) — so a start from
// the data a crash left keeps both, and the user's login then is pushed
// both.
func TestKeptPushesSurviveACrash(t *testing.T) {
	data := t.TempDir()
	a := startServer(t, func(o *server.Options) { o.Data = data })
	alice := login(t, a, 1)
	send := func(from *client, to uint32) uint64 {
		t.Helper()
		s := from.nextStamp()
		from.send(proto.AppendSend(nil, s, 100, []uint32{to}))
		status, env := from.answer(s).SendAck()
		if status != proto.SendOK {
			t.Fatalf("SEND to %d: status %d", to, status)
		}
		return env
	}
	kept := func(n uint64) {
		waitFor(t, fmt.Sprintf("%d pushes kept", n), func() bool { return a.stats().Envelopes.Pending.Waiting == int64(n) })
	}
	first := send(alice, 2) // bob, user 2 of SET 2, is offline
	kept(1)
	if err := a.Snapshot(); err != nil {
		t.Fatal(err)
	}
	second := send(alice, 2)
	kept(2)
	// A SEND made in bob's SET after the push was kept: its answer waits for
	// the SET's records up to its own, the push's among them.
	send(login(t, a, 6), 1)
	crash := t.TempDir()
	if err := os.CopyFS(crash, os.DirFS(data)); err != nil { // what a kill -9 now would leave
		t.Fatal(err)
	}
	b := startServer(t, func(o *server.Options) { o.Data = crash })
	bob := login(t, b, 2)
	got := map[uint64]bool{}
	for range 2 {
		env, _, _, _ := bob.push(proto.Envelope).Envelope()
		got[env] = true
	}
	if !got[first] || !got[second] {
		t.Fatalf("bob was pushed %v after the crash; want %#x and %#x", got, first, second)
	}
	waitFor(t, "no push kept once bob logged in", func() bool { return b.stats().Envelopes.Pending.Waiting == 0 })
}
