package server_test

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// pipelineMode is the -pipeline of every test server that does not choose
// its own: go test ./server/ -args -pipeline=chan runs the whole suite on
// the channel transport.
var (
	pipelineMode = flag.String("pipeline", "ring", "the test servers' -pipeline: ring, disruptor or chan")
	stagesMode   = flag.String("stages", "", "the test servers' -stages: fused or pipelined (default: the server's)")
)

// TestPipelines runs a representative session on every transport and egress
// write pattern that -pipeline and -egress offer (they exist for make
// perf-compare and must behave exactly like the default): LOGIN, CHAT
// across SETs, SHAKE against a campaign, a group envelope SENT and OPENed
// across SETs, both ledgers reconciled through /stats, then the graceful
// shutdown with ERROR 8 to everyone.
func TestPipelines(t *testing.T) {
	for _, v := range []struct{ pipeline, egress, stages string }{
		{"ring", "batch", "fused"}, {"ring", "batch", "pipelined"}, {"disruptor", "batch", ""}, {"chan", "batch", ""},
		{"ring", "frame", "fused"}, {"chan", "frame", ""},
	} {
		t.Run(strings.TrimSuffix(v.pipeline+"/"+v.egress+"/"+v.stages, "/"), func(t *testing.T) {
			t.Parallel()
			pipelineSession(t, v.pipeline, v.egress, v.stages)
		})
	}
}

func pipelineSession(t *testing.T, pipeline, egress, stages string) {
	ts := startServer(t, func(o *server.Options) { o.Pipeline, o.Egress, o.Stages = pipeline, egress, stages })
	const users = 8 // 4 SETs: users u and u+4 share one
	cs := make([]*client, users+1)
	for u := uint32(1); u <= users; u++ {
		cs[u] = login(t, ts, u)
	}

	// CHAT across SETs, and to an offline user.
	s := cs[1].nextStamp()
	cs[1].send(proto.AppendChat(nil, s, 2, []byte("红包?")))
	if st, to := cs[1].answer(s).ChatAck(); st != proto.ChatHanded || to != 2 {
		t.Fatalf("CHAT_ACK status %d to %d; want 0 to 2", st, to)
	}
	if from, text := cs[2].push(proto.ChatDeliver).ChatDeliver(); from != 1 || string(text) != "红包?" {
		t.Fatalf("CHAT_DELIVER from %d %q; want from 1 %q", from, text, "红包?")
	}
	s = cs[1].nextStamp()
	cs[1].send(proto.AppendChat(nil, s, 99, nil))
	if st, _ := cs[1].answer(s).ChatAck(); st != proto.ChatOffline {
		t.Fatalf("CHAT_ACK to an offline user: status %d; want 1", st)
	}

	// SHAKE until a campaign's envelopes are all taken.
	const total, window = 200, 4
	camp := ts.startCampaign("shake", fmt.Sprintf("rate=5000&total=%d&min=1&max=500", total))
	var taken, sum uint64
	seen := map[uint64]bool{}
	for rounds := 0; taken < total; rounds++ {
		if rounds > 10000 {
			t.Fatalf("%d of %d envelopes taken after %d rounds", taken, total, rounds)
		}
		for _, c := range cs[1:] {
			first := c.stamp + 1
			var b []byte
			for range window {
				b = proto.AppendShake(b, c.nextStamp())
			}
			c.send(b)
			for i := range uint64(window) {
				f := c.answer(first + i)
				st, env, amount := f.ShakeResult()
				if f.Type != proto.ShakeResult {
					t.Fatalf("SHAKE answered by %s", describe(f))
				}
				if st == proto.ShakeGot {
					if seen[env] {
						t.Fatalf("envelope %#x handed out twice", env)
					}
					seen[env] = true
					taken++
					sum += uint64(amount)
				}
			}
		}
	}
	if final := ts.waitCampaign(camp.ID); final.Amount != sum {
		t.Errorf("clients got %d fen; the campaign dealt %d", sum, final.Amount)
	}

	// A group envelope from SET 1 to users of SETs 2, 3 and 0.
	const amount = 1000
	rcpt := []uint32{2, 3, 4}
	s = cs[1].nextStamp()
	cs[1].send(proto.AppendSend(nil, s, amount, rcpt))
	st, env := cs[1].answer(s).SendAck()
	if st != proto.SendOK {
		t.Fatalf("SEND_ACK status %d; want 0", st)
	}
	var opened uint64
	for _, u := range rcpt {
		c := cs[u]
		if e, from, tot, n := c.push(proto.Envelope).Envelope(); e != env || from != 1 || tot != amount || n != 3 {
			t.Fatalf("user %d: ENVELOPE %#x from %d total %d shares %d", u, e, from, tot, n)
		}
		s := c.nextStamp()
		c.send(proto.AppendOpen(nil, s, env))
		st, _, a := c.answer(s).OpenResult()
		if st != proto.OpenOK {
			t.Fatalf("user %d: OPEN_RESULT status %d; want 0", u, st)
		}
		opened += uint64(a)
	}
	if opened != amount {
		t.Errorf("shares add up to %d; want %d", opened, amount)
	}

	// PINGs in one write: with -egress=frame each PONG is a write of its own.
	_, body := ts.do("GET", "/metrics", "")
	writesBefore := sampleOf(t, string(body), "hongbao_writes_total")
	var b []byte
	const pings = 32
	for range pings {
		b = proto.AppendPing(b, cs[5].nextStamp())
	}
	cs[5].send(b)
	for i := range uint64(pings) {
		cs[5].expect(proto.Pong, cs[5].stamp-pings+1+i)
	}
	_, body = ts.do("GET", "/metrics", "")
	if w := sampleOf(t, string(body), "hongbao_writes_total") - writesBefore; egress == "frame" && w < pings {
		t.Errorf("-egress=frame: %d writes for %d PONGs; want one each", w, pings)
	}
	info := fmt.Sprintf(`hongbao_config_info{pipeline=%q,egress=%q,`, pipeline, egress)
	if !strings.Contains(string(body), info) {
		t.Errorf("/metrics has no %s…", info)
	}

	// The ledgers, as the load client reconciles them.
	stats := ts.stats()
	if stats.Shake.Got != total || stats.Shake.GotAmount != sum || stats.Shake.Pool != 0 {
		t.Errorf("/stats shake %+v; want %d got for %d fen and an empty pool", stats.Shake, total, sum)
	}
	if e := stats.Envelopes; e.Opened != 3 || e.OpenedAmount != amount || e.CreatedAmount != amount {
		t.Errorf("/stats envelopes %+v; want 3 opened for %d fen", e, amount)
	}
	if c := stats.Chat; c.Received != 2 || c.Delivered != 1 || c.Offline != 1 {
		t.Errorf("/stats chat %+v; want 2 received, 1 delivered, 1 offline", c)
	}
	checkShakeLedger(t, stats)
	checkEnvelopeLedger(t, stats)

	done := make(chan error, 1)
	go func() { done <- ts.shutdown() }()
	for _, c := range cs[1:] {
		c.expectError(proto.ErrCodeShuttingDown)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if st := ts.Stats(); st.Shake.GotAmount != sum || st.Connections != 0 {
		t.Errorf("after Shutdown: got_amount %d, %d connections; want %d, 0", st.Shake.GotAmount, st.Connections, sum)
	}
}

// sampleOf returns the value of the sample name in a /metrics text.
func sampleOf(t *testing.T, text, name string) uint64 {
	t.Helper()
	for _, line := range strings.Split(text, "\n") {
		var v uint64
		if _, err := fmt.Sscanf(line, name+" %d", &v); err == nil {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}
