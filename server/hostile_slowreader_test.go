package server_test

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// A reader that never reads: cut off past -max-pending, with ERROR 6 and the
// close, and its money still exact — under load (attackNonReader) and alone
// (TestHostileCutOff).

// attackNonReader logs in a user that never reads, with a small receive
// buffer, and pushes group envelopes, its own SHAKE answers, chats and then
// its own PONGs at it until its backlog passes -max-pending: it is cut off
// (ERROR 6 at most, then closed). The money is not lost: what it did read adds up with the
// server's got_amount, and its envelopes stay openable by the same user on
// a new connection.
func attackNonReader(a *attacker) {
	t, ts := a.t, a.ts
	const reader, pusher, helper = nonReaderUser, nonReaderUser + 1, nonReaderUser + 2
	slow := slowReader(t, ts, reader, tokenFor(reader))
	p := dial(t, ts)
	p.login(pusher, tokenFor(pusher))
	h := dial(t, ts)
	h.login(helper, tokenFor(helper))
	cutBefore := metric(t, ts, "hongbao_cut_off_total")

	// Group envelopes to the non-reader and the helper.
	totals := map[uint64]uint32{}
	for k := range 5 {
		s := p.nextStamp()
		total := uint32(100 + 37*k)
		p.send(proto.AppendSend(nil, s, total, []uint32{reader, helper}))
		st, env := p.answer(s).SendAck()
		if st != proto.SendOK {
			t.Fatalf("non-reader: SEND_ACK status %d; want 0", st)
		}
		totals[env] = total
	}
	opened := map[uint64]uint32{}
	for len(opened) < len(totals) { // the send campaign may push it others: opened too
		env, _, _, _ := h.push(proto.Envelope).Envelope()
		s := h.nextStamp()
		h.send(proto.AppendOpen(nil, s, env))
		st, _, amount := h.answer(s).OpenResult()
		if st != proto.OpenOK {
			t.Fatalf("non-reader: helper OPEN status %d; want 0", st)
		}
		if _, ours := totals[env]; ours {
			opened[env] = amount
		}
		a.open.Add(uint64(amount))
	}

	// SHAKEs it does not read the answers of, chats until its backlog is at
	// half of -max-pending, then PINGs until the server gives up on it.
	var b []byte
	const shakes = 200
	for range shakes {
		b = proto.AppendShake(b, slow.nextStamp())
	}
	_, unread := queued(t, slow.c.Conn)
	slow.send(b)
	// Read by the server before the cut-off: all of them in its socket
	// buffer (one segment on loopback, read whole), then answers coming.
	waitFor(t, "the non-reader's SHAKEs read and answered", func() bool {
		out, in := queued(t, slow.c.Conn)
		return out == 0 && in > unread
	})
	handed := fillWithChats(t, ts, p, reader)
	pings := floodUntilCutOff(t, ts, slow, 256, proto.AppendPing)

	// It reads once cut off, within the time the server goes on writing to
	// it: whole frames, ERROR 6 last, then the close.
	frames, err := drainAll(slow.c)
	if !isClosed(err) {
		t.Errorf("non-reader: after %d frames: %v; want EOF or a reset", len(frames), err)
	}
	if len(frames) == 0 || frames[len(frames)-1].Type != proto.Error {
		t.Errorf("non-reader: read %d frames and no ERROR 6 last", len(frames))
	}
	got, sum := shakeSum(frames)
	kinds := map[proto.Type]int{}
	for i, f := range frames {
		kinds[f.Type]++
		switch f.Type {
		case proto.Error:
			if f.ErrorCode() != proto.ErrCodeTooSlow || i != len(frames)-1 {
				t.Errorf("non-reader: ERROR %d as frame %d of %d; want ERROR 6 last", f.ErrorCode(), i+1, len(frames))
			}
		case proto.Envelope, proto.ChatDeliver, proto.ShakeResult, proto.Pong:
		default:
			t.Errorf("non-reader: got %s", describe(f))
		}
	}
	a.shake.Add(sum)
	if n := metric(t, ts, "hongbao_cut_off_total") - cutBefore; n != 1 {
		t.Errorf("non-reader: hongbao_cut_off_total rose by %d; want 1", n)
	}
	t.Logf("non-reader: cut off after %d chats handed, %d SHAKEs and %d PINGs sent; it then read %d ENVELOPE, %d CHAT_DELIVER, %d SHAKE_RESULT (%d got, %d fen), %d PONG, %d ERROR",
		handed, shakes, pings, kinds[proto.Envelope], kinds[proto.ChatDeliver], kinds[proto.ShakeResult], got, sum, kinds[proto.Pong], kinds[proto.Error])
	if kinds[proto.ShakeResult] > shakes || kinds[proto.ChatDeliver] > handed || kinds[proto.Pong] > pings {
		t.Errorf("non-reader: read %d SHAKE_RESULT, %d CHAT_DELIVER, %d PONG; want at most %d, %d, %d",
			kinds[proto.ShakeResult], kinds[proto.ChatDeliver], kinds[proto.Pong], shakes, handed, pings)
	}

	// Its envelopes are still its to open, from a new connection.
	again := dial(t, ts)
	again.login(reader, tokenFor(reader))
	for env, total := range totals {
		s := again.nextStamp()
		again.send(proto.AppendOpen(nil, s, env))
		st, _, amount := again.answer(s).OpenResult()
		if st != proto.OpenOK || opened[env]+amount != total {
			t.Errorf("non-reader: OPEN %#x again: status %d amount %d; want 0 and the %d fen the helper left of %d",
				env, st, amount, total-opened[env], total)
		}
		a.open.Add(uint64(amount))
	}
	for _, c := range []*client{again, p, h} {
		c.c.Close()
	}
}

// fillWithChats has p push 1 KiB chats at user, which reads nothing, 4 to a
// write, until one is not delivered (CHAT_ACK 2): user's unwritten output is
// at half of -max-pending, and the kernel's buffers on the way to it are
// full, in few frames. Chats take it no further: what passes -max-pending
// from there must be user's own answers. It returns the chats handed to
// user. The server's -chat-rate must let them through.
func fillWithChats(t *testing.T, ts *testServer, p *client, user uint32) (handed int) {
	t.Helper()
	text := chatText(proto.MaxChatText)
	// CHAT_ACK 2 also answers a chat shed by delay or met by a full ring
	// (a loaded machine): only a drop for the backlog says it is at half.
	dropped := metric(t, ts, "hongbao_chat_dropped_total")
	for deadline := time.Now().Add(waitTime); ; {
		if time.Now().After(deadline) {
			t.Fatalf("user %d still takes chats after %d handed to it in %v", user, handed, waitTime)
		}
		var b []byte
		first := p.stamp + 1
		for range 4 {
			b = proto.AppendChat(b, p.nextStamp(), user, text)
		}
		p.send(b)
		full := false
		for s := first; s <= p.stamp; s++ {
			switch st, _ := p.answer(s).ChatAck(); st {
			case proto.ChatHanded:
				handed++
			case proto.ChatOverloaded:
				full = true
			default:
				t.Fatalf("a chat to user %d: CHAT_ACK %d after %d handed; want 0 or 2 (never cut off by chats, nor limited here)", user, st, handed)
			}
		}
		if full && metric(t, ts, "hongbao_chat_dropped_total") != dropped {
			return handed
		}
	}
}

// floodUntilCutOff has slow, which reads nothing, pipeline requests (made
// by appendReq, batch to a write) until the server has cut it off
// (hongbao_cut_off_total rose): its own answers pass -max-pending. It
// returns the requests written.
func floodUntilCutOff(t *testing.T, ts *testServer, slow *client, batch int, appendReq func(dst []byte, stamp uint64) []byte) (sent int) {
	t.Helper()
	cutBefore := metric(t, ts, "hongbao_cut_off_total")
	for i, deadline := 0, time.Now().Add(waitTime); ; i++ {
		if i%4 == 3 && metric(t, ts, "hongbao_cut_off_total") != cutBefore { // a scrape costs a millisecond
			return sent
		}
		if time.Now().After(deadline) {
			t.Fatalf("user %d still connected after %d requests whose answers it did not read, in %v", slow.user, sent, waitTime)
		}
		var b []byte
		for range batch {
			b = appendReq(b, slow.nextStamp())
		}
		slow.c.SetWriteDeadline(time.Now().Add(time.Second))
		if slow.c.Send(b) == nil { // fails once the server no longer reads it
			sent += batch
		}
	}
}

// shakeSum counts the SHAKE_RESULTs among frames that got an envelope, and
// their fen.
func shakeSum(frames []proto.Frame) (got, fen uint64) {
	for _, f := range frames {
		if f.Type != proto.ShakeResult {
			continue
		}
		if st, _, amount := f.ShakeResult(); st == proto.ShakeGot {
			got++
			fen += uint64(amount)
		}
	}
	return got, fen
}

// cutOff logs in a user that does not read (a small receive buffer), has it
// send SHAKEs into a running shake campaign, pushes chats at it until its
// backlog is at half of -max-pending, and has it send PINGs, in one write,
// whose answers take it past the limit. With keepSending it sends SHAKEs
// instead until the server cuts it off, and some after, so that it still
// sends when the server closes it. Then it reads everything that reached it
// and returns the frames and the fen of its SHAKE_RESULTs, once the server
// has released it.
func cutOff(t *testing.T, keepSending bool) (frames []proto.Frame, read uint64, ts *testServer) {
	ts = startServer(t, func(o *server.Options) {
		o.MaxPending = 32 << 10
		o.ChatRate, o.ChatBurst = 1e9, 1<<20 // fillWithChats sends thousands
	})
	camp := ts.startCampaign("shake", "rate=100000&total=20000&min=1&max=10")
	ts.waitCampaign(camp.ID)
	slow := slowReader(t, ts, 1, nil)
	var b []byte
	for range 2000 {
		b = proto.AppendShake(b, slow.nextStamp())
	}
	slow.send(b)
	p := login(t, ts, 2)
	cutBefore := metric(t, ts, "hongbao_cut_off_total")
	fillWithChats(t, ts, p, 1)
	if keepSending {
		floodUntilCutOff(t, ts, slow, 16, proto.AppendShake)
		for range 16 {
			slow.c.SetWriteDeadline(time.Now().Add(time.Second))
			slow.c.Send(proto.AppendShake(nil, slow.nextStamp())) // fails once it is closed
		}
	} else {
		b = b[:0]
		for range 2 * (32 << 10) / proto.HeaderLen { // PONGs (a header each) worth twice -max-pending
			b = proto.AppendPing(b, slow.nextStamp())
		}
		slow.send(b)
		waitFor(t, "the reader cut off", func() bool { return metric(t, ts, "hongbao_cut_off_total") != cutBefore })
	}
	// The session forgets the user at the cut-off, while its connection still
	// drains: a chat to it is answered offline, not handed to a connection
	// that would drop it.
	waitFor(t, "the cut-off user offline", func() bool { return metric(t, ts, "hongbao_users_online") == 1 })
	if n := metric(t, ts, "hongbao_connections"); n != 2 {
		t.Logf("the cut-off connection is gone already (%d connections): the chat below cannot tell a draining one", n)
	}
	// "Overloaded" says retry: the cut-off user's SET may still be full of
	// what its flood queued.
	var st uint8
	waitFor(t, "a chat to the cut-off user answered other than overloaded", func() bool {
		s := p.nextStamp()
		p.send(proto.AppendChat(nil, s, 1, []byte("still there?")))
		st, _ = p.answer(s).ChatAck()
		return st != proto.ChatOverloaded
	})
	if st != proto.ChatOffline {
		t.Errorf("a chat to the cut-off user: CHAT_ACK %d; want %d (offline)", st, proto.ChatOffline)
	}
	frames, err := drainAll(slow.c)
	if !isClosed(err) {
		t.Fatalf("after %d frames: %v; want EOF or a reset", len(frames), err)
	}
	_, read = shakeSum(frames)
	waitFor(t, "the reader released", func() bool { return ts.Stats().Connections == 1 })
	return frames, read, ts
}

// TestHostileCutOff checks a reader that never reads, cut off past
// -max-pending, against docs/PROTOCOL.md: it gets ERROR 6 then the close, and the
// SHAKE_RESULTs it can read add up to what the server counts as got.
func TestHostileCutOff(t *testing.T) {
	t.Run("quiet reader: its money", func(t *testing.T) {
		frames, read, ts := cutOff(t, false)
		if got := ts.stats().Shake.GotAmount; got != read {
			t.Errorf("the reader read SHAKE_RESULTs worth %d fen; the server counts %d got", read, got)
		}
		t.Logf("%d frames reached the reader, the last %s; %d fen read and counted", len(frames), describe(frames[len(frames)-1]), read)
	})
	t.Run("quiet reader: ERROR 6", func(t *testing.T) {
		// The egress goes on writing to a cut-off connection for a while:
		// a reader that reads from then on gets its backlog, then ERROR 6.
		frames, _, _ := cutOff(t, false)
		if last := frames[len(frames)-1]; last.Type != proto.Error || last.ErrorCode() != proto.ErrCodeTooSlow {
			t.Errorf("the last of the %d frames that reached the reader is %s; want ERROR 6", len(frames), describe(last))
		}
	})
	t.Run("reader still sending: its money", func(t *testing.T) {
		// A peer that keeps sending after the cut-off must still get every
		// answer the kernel holds for it (each counted got): were both
		// directions shut, the kernel would reset a socket in FIN-WAIT that
		// receives data and throw those answers away. So only the read side
		// shuts, and the close waits for the peer's acknowledgement.
		frames, read, ts := cutOff(t, true)
		if got := ts.stats().Shake.GotAmount; got != read {
			t.Errorf("the reader read %d frames, SHAKE_RESULTs worth %d fen; the server counts %d got", len(frames), read, got)
		}
	})
}
