package server_test

import (
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
