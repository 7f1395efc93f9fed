package server_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// TestSendLimits, over TCP: a SEND flood from one user is answered 3 past its
// burst, and a new connection does not refill the bucket; the recipient who
// was offline gets each envelope's push at its login and opens its share,
// the ledger exact; a SET at its share of -max-envelopes answers 3.
func TestSendLimits(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) {
		o.SendRate, o.SendBurst = 0.001, 5 // no refill within the test
		o.MaxEnvelopes = 20                // 4 SETs: 5 each
	})
	sender := login(t, ts, 1) // SET 1
	const flood = 50
	var frames [][]byte
	first := sender.stamp + 1
	for range flood {
		frames = append(frames, proto.AppendSend(nil, sender.nextStamp(), 100, []uint32{2, 6})) // offline: SET 2
	}
	before := time.Now().UnixNano()
	sender.send(frames...)
	var envs []uint64
	limited := 0
	for s := first; s < first+flood; s++ {
		switch st, env := sender.answer(s).SendAck(); st {
		case proto.SendOK:
			envs = append(envs, env)
		case proto.SendLimited:
			limited++
		default:
			t.Fatalf("SEND_ACK status %d; want 0 or 3", st)
		}
	}
	after := time.Now().UnixNano()
	if len(envs) != 5 || limited != flood-5 {
		t.Errorf("a flood of %d SENDs: %d ok, %d limited; want the burst of 5 and %d", flood, len(envs), limited, flood-5)
	}
	sender.c.Close()
	sender = login(t, ts, 1)
	s := sender.nextStamp()
	sender.send(proto.AppendSend(nil, s, 100, []uint32{2, 6}))
	if st, _ := sender.answer(s).SendAck(); st != proto.SendLimited {
		t.Errorf("SEND from a new connection: status %d; want 3: reconnecting does not refill the bucket", st)
	}

	// User 2 was offline: its login brings every push, stamped with the
	// creation time, and it opens its shares.
	waitFor(t, "the pushes to be kept", func() bool { return ts.stats().Envelopes.Pending.Waiting == int64(2*len(envs)) })
	r := login(t, ts, 2)
	var opened uint64
	for range envs {
		p := r.push(proto.Envelope)
		env, from, total, n := p.Envelope()
		if from != 1 || total != 100 || n != 2 || int64(p.Stamp) < before || int64(p.Stamp) > after {
			t.Errorf("ENVELOPE at login: %s; want from 1, 100 fen, 2 shares, stamped within [%d, %d]", describe(p), before, after)
		}
		opened += uint64(openOK(r, env))
	}

	// SET 1 holds user 1's 5 envelopes, live until user 6 opens them: at its
	// budget of 5, another user of SET 1 gets 3; a user of another SET does
	// not.
	for _, u := range []uint32{5, 3} {
		c := login(t, ts, u)
		s := c.nextStamp()
		c.send(proto.AppendSend(nil, s, 100, []uint32{2}))
		st, _ := c.answer(s).SendAck()
		if want := map[uint32]uint8{5: proto.SendLimited, 3: proto.SendOK}[u]; st != want {
			t.Errorf("user %d's SEND: status %d; want %d", u, st, want)
		}
	}

	stats := ts.stats()
	e := stats.Envelopes
	if e.OpenedAmount != opened || e.SendLimited != uint64(limited+2) || e.SendLimitedBy.Budget != 1 {
		t.Errorf("envelopes %+v; want opened_amount %d, send_limited %d, 1 by the budget", e, opened, limited+2)
	}
	if e.Pending.Repushed != uint64(len(envs)) || e.Pending.Waiting != int64(len(envs)) {
		t.Errorf("pending pushes %+v; want %d pushed at login, %d still kept for user 6", e.Pending, len(envs), len(envs))
	}
	t.Logf("send_limited %d %+v; pending pushes %+v", e.SendLimited, e.SendLimitedBy, e.Pending)
	checkEnvelopeLedger(t, stats)
}

// TestLimitFlags: the flags' defaults, their validation, and each SET's
// share of the budget.
func TestLimitFlags(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o, err := server.ParseFlags(fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.SendRate != server.DefaultSendRate || o.SendBurst != server.DefaultSendBurst ||
		o.MaxLivePerUser != server.DefaultMaxLivePerUser || o.MaxEnvelopes != server.DefaultMaxEnvelopes {
		t.Errorf("defaults %v/s burst %d, %d live per user, %d envelopes", o.SendRate, o.SendBurst, o.MaxLivePerUser, o.MaxEnvelopes)
	}
	fs = flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err = server.ParseFlags(fs, []string{"-send-rate", "-1", "-send-burst", "-1", "-max-live-per-user", "-2", "-max-envelopes", "-3"})
	for _, f := range []string{"-send-rate", "-send-burst", "-max-live-per-user", "-max-envelopes"} {
		if err == nil || !strings.Contains(err.Error(), f+":") {
			t.Errorf("negative %s: %v; want an error naming it", f, err)
		}
	}
	if o.ChatRate != server.DefaultChatRate || o.ChatBurst != server.DefaultChatBurst {
		t.Errorf("CHAT defaults %v/s burst %d; want %v/s burst %d", o.ChatRate, o.ChatBurst, server.DefaultChatRate, server.DefaultChatBurst)
	}
	fs = flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err = server.ParseFlags(fs, []string{"-chat-rate", "0", "-chat-burst", "0", "-max-pending", "2147483648"})
	for _, f := range []string{"-chat-rate: 0 is not in (0, 1e9]", "-chat-burst: 0 is below 1", "-max-pending: 2147483648 is over 1 GiB"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v; want it to say %q", err, f)
		}
	}
	for _, rate := range []string{"NaN", "2e9", "-1"} {
		fs = flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if _, err := server.ParseFlags(fs, []string{"-chat-rate", rate}); err == nil || !strings.Contains(err.Error(), "-chat-rate: ") {
			t.Errorf("-chat-rate %s: %v; want an error naming it", rate, err)
		}
	}
	for _, tc := range []struct{ envelopes, sets, perSET int }{{16, 4, 4}, {17, 4, 5}, {1, 32, 1}, {server.DefaultMaxEnvelopes, 32, 32768}} {
		o := server.Options{MaxEnvelopes: tc.envelopes, Sets: tc.sets}
		if got := o.Limits().MaxEnvelopes; got != tc.perSET {
			t.Errorf("-max-envelopes %d over %d SETs: %d a SET; want %d", tc.envelopes, tc.sets, got, tc.perSET)
		}
	}
}

// openOK has c OPEN env, requires status 0 and returns the share.
func openOK(c *client, env uint64) uint32 {
	c.t.Helper()
	s := c.nextStamp()
	c.send(proto.AppendOpen(nil, s, env))
	st, _, amount := c.answer(s).OpenResult()
	if st != proto.OpenOK {
		c.t.Fatalf("user %d: OPEN %#x: status %d; want 0", c.user, env, st)
	}
	return amount
}
