package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// These tests speak docs/PROTOCOL.md byte for byte to a whole server over TCP, with
// no envelopes involved. Users u and u+4 share a SET (Sets: 4, SET = u mod 4).

func TestLoginWithSecret(t *testing.T) {
	t.Parallel()
	secret := []byte("a test secret")
	ts := startServer(t, func(o *server.Options) { o.AuthSecret = string(secret) })
	now := time.Now().Unix()
	tok := func(user uint32, expiry int64) []byte { return proto.MintToken(nil, secret, user, expiry) }
	flipped := tok(15, now+60)
	flipped[len(flipped)-1] ^= 1

	f := func(name string, user uint32, token []byte, want uint8) { loginCase(t, ts, name, user, token, want) }
	f("good token", 7, tok(7, now+60), proto.LoginOK)
	f("good token expiring this second", 8, tok(8, now+1), proto.LoginOK)
	f("forged: another secret", 9, proto.MintToken(nil, []byte("not the secret"), 9, now+60), proto.LoginBadToken)
	f("expired", 10, tok(10, now-10), proto.LoginBadToken)
	f("truncated", 11, tok(11, now+60)[:proto.TokenLen-1], proto.LoginBadToken)
	f("a byte too long", 12, append(tok(12, now+60), 0), proto.LoginBadToken)
	f("another user's token", 13, tok(14, now+60), proto.LoginBadToken)
	f("no token", 14, nil, proto.LoginBadToken)
	f("MAC bit flipped", 15, flipped, proto.LoginBadToken)
	f("user 0 with a good token", 0, tok(0, now+60), proto.LoginInvalidUser)
}

// loginCase logs user in with token and expects status want: a refused
// login is followed by a close, an accepted one by a working connection.
func loginCase(t *testing.T, ts *testServer, name string, user uint32, token []byte, want uint8) {
	t.Run(name, func(t *testing.T) {
		c := dial(t, ts)
		if got := c.loginStatus(user, token); got != want {
			t.Fatalf("LOGIN_ACK status %d; want %d", got, want)
		}
		if want != proto.LoginOK {
			c.expectClosed()
			return
		}
		c.user = user
		c.ping()
	})
}

func TestLoginWithoutSecret(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	f := func(name string, user uint32, token []byte, want uint8) { loginCase(t, ts, name, user, token, want) }
	f("no token", 1, nil, proto.LoginOK)
	f("any token is ignored", 2, []byte("whatever"), proto.LoginOK)
	f("user 0", 0, nil, proto.LoginInvalidUser)
	f("user 2^32-1", 1<<32-1, nil, proto.LoginOK)
}

func TestDoubleLoginOnOneConnection(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := login(t, ts, 5)
	c.send(proto.AppendLogin(nil, 99, 6, nil))
	c.expectError(proto.ErrCodeMalformed)
	// The user is gone once the server has processed the close.
	other := login(t, ts, 7)
	waitFor(t, "user 5 offline", func() bool {
		s := other.nextStamp()
		other.send(proto.AppendChat(nil, s, 5, []byte("hi")))
		st, _ := other.answer(s).ChatAck()
		return st == proto.ChatOffline
	})
	// And user 6 never logged in through the second LOGIN.
	s := other.nextStamp()
	other.send(proto.AppendChat(nil, s, 6, []byte("hi")))
	if st, _ := other.answer(s).ChatAck(); st != proto.ChatOffline {
		t.Fatalf("CHAT to user 6: status %d; want 1, the second LOGIN must not log it in", st)
	}
}

func TestSecondConnectionReplacesFirst(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	old := login(t, ts, 21)
	peer := login(t, ts, 22) // another SET
	neu := login(t, ts, 21)
	old.expectError(proto.ErrCodeReplaced)
	neu.ping()

	// Pushes for user 21 now reach the new connection.
	s := peer.nextStamp()
	peer.send(proto.AppendChat(nil, s, 21, []byte("to the new one")))
	if st, to := peer.answer(s).ChatAck(); st != proto.ChatHanded || to != 21 {
		t.Fatalf("CHAT_ACK status %d to %d; want 0 to 21", st, to)
	}
	d := neu.push(proto.ChatDeliver)
	if from, text := d.ChatDeliver(); from != 22 || string(text) != "to the new one" || d.Stamp != s {
		t.Fatalf("CHAT_DELIVER from %d %q stamp %d; want from 22, the text, stamp %d", from, text, d.Stamp, s)
	}
	// The old connection's close must not log the new one out.
	waitFor(t, "the replaced connection released", func() bool { return ts.stats().Connections == 2 })
	s = peer.nextStamp()
	peer.send(proto.AppendChat(nil, s, 21, []byte("still there?")))
	if st, _ := peer.answer(s).ChatAck(); st != proto.ChatHanded {
		t.Fatalf("CHAT_ACK status %d after the old connection closed; want 0", st)
	}
	neu.push(proto.ChatDeliver)
}

func TestFrameBeforeLogin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	f := func(name string, frame []byte) {
		t.Run(name, func(t *testing.T) {
			c := dial(t, ts)
			c.send(frame)
			c.expectError(proto.ErrCodeNotLoggedIn)
		})
	}
	f("PING", proto.AppendPing(nil, 1))
	f("SHAKE", proto.AppendShake(nil, 2))
	f("OPEN", proto.AppendOpen(nil, 3, 42))
	f("SEND", proto.AppendSend(nil, 4, 100, []uint32{2}))
	f("CHAT", proto.AppendChat(nil, 5, 2, []byte("hi")))
	f("SHAKE then LOGIN in one write", append(proto.AppendShake(nil, 6), proto.AppendLogin(nil, 7, 3, nil)...))
}

func TestLoginTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	ts := startServer(t, func(o *server.Options) { o.LoginTimeout = timeout })
	start := time.Now()
	idle := dial(t, ts)
	partial := dial(t, ts)
	partial.send(proto.AppendLogin(nil, 1, 3, nil)[:7]) // half a LOGIN never completes
	prompt := login(t, ts, 4)

	idle.expectError(proto.ErrCodeLoginTimeout)
	if took := time.Since(start); took < timeout-50*time.Millisecond {
		t.Errorf("ERROR 7 after %v; want no sooner than the %v login timeout", took, timeout)
	}
	partial.expectError(proto.ErrCodeLoginTimeout)
	prompt.ping() // logged in in time: past the timeout and still served
}

func TestPing(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := login(t, ts, 3)
	for _, stamp := range []uint64{0, 1, 0x0102030405060708, 1<<64 - 1} {
		c.send(proto.AppendPing(nil, stamp))
		if f := c.expect(proto.Pong, stamp); len(f.Body) != 0 {
			t.Errorf("PONG with %d body bytes; want 0", len(f.Body))
		}
	}
}

// chatText returns n bytes of valid UTF-8 with multi-byte runes throughout.
func chatText(n int) []byte {
	var b []byte
	for len(b) < n {
		for _, r := range "红包 🧧 é ß 😀 abc " {
			if len(b)+utf8.RuneLen(r) > n {
				for len(b) < n {
					b = append(b, '.')
				}
				return b
			}
			b = utf8.AppendRune(b, r)
		}
	}
	return b
}

func TestChat(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	alice, ann, bob := login(t, ts, 1), login(t, ts, 5), login(t, ts, 2) // alice and ann share a SET
	long := chatText(proto.MaxChatText)
	if len(long) != 1024 || !utf8.Valid(long) {
		t.Fatalf("test text: %d bytes, valid %v", len(long), utf8.Valid(long))
	}
	f := func(name string, from, to *client, text []byte) {
		t.Run(name, func(t *testing.T) {
			s := from.nextStamp()
			from.send(proto.AppendChat(nil, s, to.user, text))
			ack := from.answer(s)
			if ack.Type != proto.ChatAck {
				t.Fatalf("got %s; want CHAT_ACK", describe(ack))
			}
			if st, u := ack.ChatAck(); st != proto.ChatHanded || u != to.user {
				t.Fatalf("CHAT_ACK status %d to %d; want 0 to %d", st, u, to.user)
			}
			d := to.push(proto.ChatDeliver)
			got, gotText := d.ChatDeliver()
			if got != from.user || d.Stamp != s || !bytes.Equal(gotText, text) {
				t.Fatalf("CHAT_DELIVER from %d stamp %d text %d bytes %q…; want from %d stamp %d and the %d bytes sent",
					got, d.Stamp, len(gotText), gotText[:min(len(gotText), 16)], from.user, s, len(text))
			}
		})
	}
	f("same SET, 1024 bytes", alice, ann, long)
	f("across SETs, 1024 bytes", alice, bob, long)
	f("back across SETs", bob, alice, []byte("héllo, 世界"))
	f("empty text", ann, bob, nil)

	t.Run("offline recipient", func(t *testing.T) {
		s := alice.nextStamp()
		alice.send(proto.AppendChat(nil, s, 77, []byte("anyone?")))
		if st, to := alice.answer(s).ChatAck(); st != proto.ChatOffline || to != 77 {
			t.Fatalf("CHAT_ACK status %d to %d; want 1 to 77", st, to)
		}
	})
	st := ts.stats()
	if st.Chat.Received != 5 || st.Chat.Delivered != 4 || st.Chat.Offline != 1 {
		t.Errorf("chat stats %+v; want received 5, delivered 4, offline 1", st.Chat)
	}
}

// malformedCase is a frame that breaks docs/PROTOCOL.md and the ERROR it earns.
type malformedCase struct {
	name  string
	frame []byte
	code  uint8
}

// malformedCases returns every kind of malformed frame: len out of range
// (65,535 included), unknown and server-to-client types, bodies shorter than
// their type needs, and variable parts past len or over their limit.
func malformedCases() []malformedCase {
	cs := []malformedCase{
		{"len 11", rawFrame(11, byte(proto.Ping), 0, nil), proto.ErrCodeMalformed},
		{"len 0", rawFrame(0, byte(proto.Ping), 0, nil), proto.ErrCodeMalformed},
		{"len 4097", rawFrame(4097, byte(proto.Ping), 0, nil), proto.ErrCodeTooLarge},
		{"len 65535", rawFrame(65535, byte(proto.Chat), 0, nil), proto.ErrCodeTooLarge},
		{"type 0x00", rawFrame(12, 0x00, 0, nil), proto.ErrCodeUnknownType},
		{"type 0x07", rawFrame(12, 0x07, 0, nil), proto.ErrCodeUnknownType},
		{"server type PONG", rawFrame(12, byte(proto.Pong), 0, nil), proto.ErrCodeUnknownType},
		{"OPEN with a 4-byte body", rawFrame(16, byte(proto.Open), 0, make([]byte, 4)), proto.ErrCodeMalformed},
		{"SEND with a 5-byte body", rawFrame(17, byte(proto.Send), 0, make([]byte, 5)), proto.ErrCodeMalformed},
		{"CHAT with a 5-byte body", rawFrame(17, byte(proto.Chat), 0, make([]byte, 5)), proto.ErrCodeMalformed},
		{"LOGIN with a 3-byte body", rawFrame(15, byte(proto.Login), 0, make([]byte, 3)), proto.ErrCodeMalformed},
	}
	chat := make([]byte, 6+1025)
	binary.BigEndian.PutUint32(chat, 1)
	binary.BigEndian.PutUint16(chat[4:], 1025)
	cs = append(cs, malformedCase{"CHAT text_len 1025", rawFrame(12+len(chat), byte(proto.Chat), 0, chat), proto.ErrCodeMalformed})
	short := make([]byte, 6+10)
	binary.BigEndian.PutUint32(short, 1)
	binary.BigEndian.PutUint16(short[4:], 11)
	cs = append(cs, malformedCase{"CHAT text_len past len", rawFrame(12+len(short), byte(proto.Chat), 0, short), proto.ErrCodeMalformed})
	send := make([]byte, 6+4)
	binary.BigEndian.PutUint32(send, 100)
	binary.BigEndian.PutUint16(send[4:], 2)
	return append(cs, malformedCase{"SEND n past len", rawFrame(12+len(send), byte(proto.Send), 0, send), proto.ErrCodeMalformed})
}

func TestMalformedAfterLogin(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	user := uint32(100)
	for _, mc := range malformedCases() {
		t.Run(mc.name, func(t *testing.T) {
			user++
			c := login(t, ts, user)
			// A good frame in the same write is answered before the ERROR.
			c.send(proto.AppendPing(nil, 5), mc.frame)
			c.expect(proto.Pong, 5)
			c.expectError(mc.code)
		})
	}

	// Every violator is gone, and the server still serves.
	waitFor(t, "every violating connection released", func() bool { return ts.stats().Connections == 0 })
	login(t, ts, 1).ping()
}

// request is a frame with the answer type it must get.
type request struct {
	frame []byte
	want  proto.Type
}

// mixedRequests returns n requests of every kind that needs no state, with
// stamps first, first+1, …
func mixedRequests(first uint64, n int) []request {
	rs := make([]request, n)
	for i := range rs {
		s := first + uint64(i)
		switch i % 6 {
		case 0:
			rs[i] = request{proto.AppendPing(nil, s), proto.Pong}
		case 1:
			rs[i] = request{proto.AppendShake(nil, s), proto.ShakeResult}
		case 2:
			rs[i] = request{proto.AppendOpen(nil, s, 12345), proto.OpenResult} // SET 0 owns it; no such envelope
		case 3:
			rs[i] = request{proto.AppendChat(nil, s, 999, []byte("∅ offline")), proto.ChatAck}
		case 4:
			rs[i] = request{proto.AppendSend(nil, s, 0, []uint32{2, 3}), proto.SendAck} // invalid total
		case 5:
			rs[i] = request{proto.AppendOpen(nil, s, 1<<63|7), proto.OpenResult} // a shake id: no SET owns it
		}
	}
	return rs
}

// expectAnswers reads until every request has its one answer, in any order,
// each of the right type with a status it may have.
func expectAnswers(t *testing.T, c *client, first uint64, rs []request) {
	t.Helper()
	seen := make([]bool, len(rs))
	for range rs {
		f := c.next()
		i := int(f.Stamp - first)
		if f.Stamp < first || i >= len(rs) || f.Type == proto.Error {
			t.Fatalf("got %s; want answers with stamps %d..%d", describe(f), first, first+uint64(len(rs))-1)
		}
		if seen[i] {
			t.Fatalf("second answer with stamp %d: %s", f.Stamp, describe(f))
		}
		seen[i] = true
		if f.Type != rs[i].want {
			t.Fatalf("stamp %d answered by %s; want %v", f.Stamp, describe(f), rs[i].want)
		}
		ok := true
		switch f.Type {
		case proto.ShakeResult:
			st, env, amount := f.ShakeResult()
			ok = (st == proto.ShakeNothing && env == 0 && amount == 0) || st == proto.ShakeOverloaded
		case proto.OpenResult:
			st, _, _ := f.OpenResult()
			ok = st == proto.OpenNoSuch || st == proto.OpenOverloaded
		case proto.ChatAck:
			st, to := f.ChatAck()
			ok = (st == proto.ChatOffline || st == proto.ChatOverloaded || st == proto.ChatLimited) && to == 999
		case proto.SendAck:
			st, _ := f.SendAck()
			ok = st == proto.SendInvalid || st == proto.SendOverloaded
		}
		if !ok {
			t.Fatalf("stamp %d answered by %s: not a status this request may get", f.Stamp, describe(f))
		}
	}
}

func TestFramesSplitAtEveryByte(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	c := login(t, ts, 9)
	const per = 6
	var stream []byte
	for _, r := range mixedRequests(0, per) {
		stream = append(stream, r.frame...)
	}
	t.Run("one byte per write", func(t *testing.T) {
		rs := mixedRequests(1_000_000, per)
		for _, r := range rs {
			for i := range r.frame {
				c.send(r.frame[i : i+1])
			}
		}
		expectAnswers(t, c, 1_000_000, rs)
	})
	t.Run("two writes cut at every byte", func(t *testing.T) {
		for cut := 1; cut < len(stream); cut++ {
			first := uint64(2_000_000 + cut*per)
			rs := mixedRequests(first, per)
			var b []byte
			for _, r := range rs {
				b = append(b, r.frame...)
			}
			c.send(b[:cut])
			c.send(b[cut:])
			expectAnswers(t, c, first, rs)
			if t.Failed() {
				t.Fatalf("cut at byte %d of %d", cut, len(b))
			}
		}
	})
}

func TestThousandFramesInOneWrite(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.Ring = 64 }) // 1000 requests overflow it: stalls and overloads
	c := login(t, ts, 10)
	rs := mixedRequests(1, 1000)
	var b []byte
	for _, r := range rs {
		b = append(b, r.frame...)
	}
	c.send(b)
	expectAnswers(t, c, 1, rs)
	c.ping()
}

// TestSlowReaderIsCutOff checks a user that pipelines requests and never
// reads their answers: cut off past -max-pending, with ERROR 6 after what
// it can still read, then closed. Chats to it meanwhile are dropped
// (CHAT_ACK 2) once its backlog is at half the limit, never what gets it cut
// off, and its SET goes on serving others.
func TestSlowReaderIsCutOff(t *testing.T) {
	ts := startServer(t, func(o *server.Options) {
		o.MaxPending = 8192
		o.ChatRate = 1e6 // a chat a round, faster than -chat-rate: its recipient's backlog is under test
	})
	// The slow user reads nothing; a small receive buffer keeps the kernel
	// from absorbing megabytes before the server's backlog limit matters.
	slow := slowReader(t, ts, 1, nil)
	sender := login(t, ts, 2)
	bystander := login(t, ts, 5) // the slow user's SET: same egress

	// Each round: 1 KiB chats to it, 2 (of the 4 KiB that is half the limit)
	// until one is dropped (its backlog is at half the limit, the kernel's
	// buffers full, in few frames), then 1
	// beside 64 PINGs from the slow user (768 bytes of PONGs it does not
	// read); and the bystander's PING through the same SET, which means the
	// egress has handled the round before the next.
	text := chatText(proto.MaxChatText)
	const batch = 64
	pings, acks := 0, [proto.ChatOverloaded + 1]int{}
	for deadline := time.Now().Add(waitTime); acks[proto.ChatOffline] == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("slow reader still connected after %d PINGs whose answers it did not read, in %v (CHAT_ACKs to it by status: %v)",
				pings, waitTime, acks)
		}
		chats := 2
		if acks[proto.ChatOverloaded] > 0 {
			chats = 1
			var b []byte
			for range batch {
				b = proto.AppendPing(b, slow.nextStamp())
			}
			slow.c.SetWriteDeadline(time.Now().Add(time.Second))
			if slow.c.Send(b) == nil { // fails once the server no longer reads it
				pings += batch
			}
		}
		var b []byte
		first := sender.stamp + 1
		for range chats {
			b = proto.AppendChat(b, sender.nextStamp(), 1, text)
		}
		sender.send(b)
		for s := first; s <= sender.stamp; s++ {
			st, to := sender.answer(s).ChatAck()
			if to != 1 || int(st) >= len(acks) {
				t.Fatalf("CHAT_ACK status %d to %d; want 0, 1 or 2 to 1", st, to)
			}
			acks[st]++ // 0: handed; 2: dropped, its backlog is full; 1: offline, cut off
		}
		bystander.ping()
	}
	t.Logf("cut off after %d PINGs; chats to it: %d handed, %d dropped", pings, acks[proto.ChatHanded], acks[proto.ChatOverloaded])
	if acks[proto.ChatOverloaded] == 0 {
		t.Errorf("no chat to the slow reader was dropped before its cut-off; want CHAT_ACK 2 once its backlog is at half of -max-pending")
	}

	// What reaches the slow reader, which reads from its cut-off on: PONGs
	// (at most one a PING) and chats from the sender (at most those handed
	// to it), then ERROR 6, then the close.
	frames, err := drainAll(slow.c)
	if !isClosed(err) {
		t.Fatalf("slow reader after %d frames: %v; want EOF or a reset", len(frames), err)
	}
	kinds := map[proto.Type]int{}
	for i, f := range frames {
		kinds[f.Type]++
		switch f.Type {
		case proto.Error:
			if f.ErrorCode() != proto.ErrCodeTooSlow || i != len(frames)-1 {
				t.Errorf("slow reader got ERROR %d as frame %d of %d; want ERROR 6 last", f.ErrorCode(), i+1, len(frames))
			}
		case proto.ChatDeliver:
			if from, txt := f.ChatDeliver(); from != 2 || !bytes.Equal(txt, text) {
				t.Fatalf("slow reader got %s; want it from 2 with the text sent", describe(f))
			}
		case proto.Pong:
		default:
			t.Fatalf("slow reader got %s; want PONG, CHAT_DELIVER, then ERROR 6", describe(f))
		}
	}
	t.Logf("the slow reader read %d PONGs of %d PINGs and %d chats of %d handed, then ERROR 6: %v",
		kinds[proto.Pong], pings, kinds[proto.ChatDeliver], acks[proto.ChatHanded], kinds[proto.Error] == 1)
	if kinds[proto.Pong] > pings || kinds[proto.ChatDeliver] > acks[proto.ChatHanded] || kinds[proto.Error] != 1 {
		t.Errorf("slow reader received %d PONGs, %d chats, %d ERRORs; want at most %d, at most %d, then ERROR 6",
			kinds[proto.Pong], kinds[proto.ChatDeliver], kinds[proto.Error], pings, acks[proto.ChatHanded])
	}
	sender.ping()
	bystander.ping()
	if st := ts.stats().Chat; st.Dropped+st.Overload != uint64(acks[proto.ChatOverloaded]) {
		t.Errorf("/stats chat %+v: dropped + overload ≠ the %d CHAT_ACK 2 the sender got", st, acks[proto.ChatOverloaded])
	}
	code, body := ts.do("GET", "/metrics", "")
	if code != 200 || !strings.Contains(string(body), "hongbao_cut_off_total 1\n") {
		t.Errorf("/metrics: %d; want hongbao_cut_off_total 1", code)
	}
}

// TestFastReaderIsNotCutOff checks that a client reading everything at once
// is not cut off for a burst of answers that its socket takes whole: the
// backlog limit is for output the peer does not take, not for one batch's
// worth of frames.
func TestFastReaderIsNotCutOff(t *testing.T) {
	t.Parallel()
	// A ring of 1024 takes a burst whole: one batch, one write.
	ts := startServer(t, func(o *server.Options) { o.MaxPending = 4096; o.Ring = 1024 })
	fast := login(t, ts, 1)
	// The reader drains its socket all the time, counting the answers.
	var read atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			f, err := fast.c.Next(waitTime)
			switch {
			case err != nil:
				done <- err
				return
			case f.Type != proto.OpenResult:
				done <- fmt.Errorf("got %s", describe(f))
				return
			}
			read.Add(1)
		}
	}()
	// OPENs of a shake envelope's id, which no SET owns: each is answered
	// OPEN_RESULT 3 (25 bytes) through the user's SET, 200 to a write: 5,000
	// bytes of answers at once, more than -max-pending.
	const rounds, burst = 20, 200
	for round := range rounds {
		var b []byte
		for range burst {
			b = proto.AppendOpen(b, fast.nextStamp(), 1<<63|5)
		}
		fast.send(b)
		for deadline, want := time.Now().Add(waitTime), int64((round+1)*burst); read.Load() < want; time.Sleep(time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("round %d: the reader stopped after %d answers of %d: %v", round, read.Load(), want, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the reader has %d answers of %d after %v", round, read.Load(), want, waitTime)
			}
		}
	}
	if n := metric(t, ts, "hongbao_cut_off_total"); n != 0 {
		t.Errorf("hongbao_cut_off_total %d; want 0: a reader that takes every burst at once is not slow", n)
	}
	fast.c.Close()
	if err := <-done; !strings.Contains(err.Error(), "closed") {
		t.Errorf("the reader ended with %v; want the test's close", err)
	}
}

// TestClosedConnectionFDReuse checks that output meant for a connection that
// closed never reaches the connection that gets its descriptor next.
func TestClosedConnectionFDReuse(t *testing.T) {
	ts := startServer(t, func(o *server.Options) { o.Sets = 2; o.Ring = 64 })
	ts.startCampaign("shake", "rate=100000&total=20000&min=1&max=10") // some SHAKEs get envelopes
	const rounds, fresh, shakes = 8, 16, 64
	user := uint32(1000)
	for round := range rounds {
		a := login(t, ts, uint32(round+1))
		var b []byte
		for i := range shakes {
			b = proto.AppendShake(b, 1<<40+uint64(i))
		}
		a.send(b)
		a.c.Close() // without reading a single answer

		cs := make([]*client, fresh)
		for i := range cs {
			user++
			cs[i] = dial(t, ts)
			cs[i].user = user
			cs[i].send(proto.AppendLogin(nil, 1, user, nil), proto.AppendPing(nil, 2))
		}
		for _, c := range cs {
			if st, u := c.expect(proto.LoginAck, 1).LoginAck(); st != proto.LoginOK || u != c.user {
				t.Fatalf("round %d: LOGIN_ACK status %d user %d; want 0, %d", round, st, u, c.user)
			}
			c.expect(proto.Pong, 2)
		}
		for _, c := range cs {
			c.send(proto.AppendPing(nil, 3))
		}
		for _, c := range cs {
			c.expect(proto.Pong, 3)
			c.c.Close()
		}
	}
	waitFor(t, "every connection released", func() bool { return ts.stats().Connections == 0 })
	ts.waitCampaign(1)
	waitFor(t, "the shake ledger to settle", func() bool {
		s := ts.stats().Shake
		return s.CreatedAmount == s.GotAmount+s.PoolAmount
	})
}

func TestGracefulShutdown(t *testing.T) {
	before := runtime.NumGoroutine()
	ts := startServer(t, nil)
	var cs []*client
	for u := uint32(1); u <= 8; u++ {
		c := login(t, ts, u)
		c.ping()
		cs = append(cs, c)
	}
	idle := dial(t, ts) // connected, not logged in
	busy := login(t, ts, 9)
	busy.send(proto.AppendShake(nil, 1), proto.AppendShake(nil, 2))

	done := make(chan error, 1)
	go func() { done <- ts.shutdown() }()
	for _, c := range cs {
		c.expectError(proto.ErrCodeShuttingDown)
	}
	idle.expectError(proto.ErrCodeShuttingDown)
	// Answers already made are written before the ERROR.
	for {
		f := busy.next()
		if f.Type == proto.Error {
			if f.ErrorCode() != proto.ErrCodeShuttingDown {
				t.Fatalf("got ERROR %d; want 8", f.ErrorCode())
			}
			busy.expectClosed()
			break
		}
		if f.Type != proto.ShakeResult {
			t.Fatalf("got %s before ERROR 8; want only SHAKE_RESULTs", describe(f))
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitTime):
		t.Fatalf("Shutdown still running after %v", waitTime)
	}
	if nc, err := net.DialTimeout("tcp", ts.addr, time.Second); err == nil {
		nc.Close()
		t.Errorf("dial after Shutdown succeeded; want the listener closed")
	}
	ts.hc.CloseIdleConnections()
	deadline := time.Now().Add(waitTime)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Shutdown; %d before the server started:\n%s",
				runtime.NumGoroutine(), before, goroutineDump())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBarePipeline checks -pipeline=none, the bare-I/O baseline: the ingress
// answers every request itself as if there were nothing, and no campaign can
// start.
func TestBarePipeline(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(o *server.Options) { o.Pipeline = "none" })
	c := login(t, ts, 3)
	rs := mixedRequests(1, 60)
	var b []byte
	for _, r := range rs {
		b = append(b, r.frame...)
	}
	c.send(b)
	expectAnswers(t, c, 1, rs)
	c.send(proto.AppendLogin(nil, 99, 3, nil))
	c.expectError(proto.ErrCodeMalformed)
	if code, body := ts.do("POST", "/campaigns/shake?rate=1&total=1&min=1&max=1", ""); code != 409 {
		t.Errorf("POST /campaigns/shake: %d %s; want 409", code, body)
	}
	waitFor(t, "the stats of 1 login and 10 SHAKEs", func() bool {
		st := ts.stats()
		return st.Logins == 1 && st.Shake.Requests == 10 && st.Shake.Empty == 10
	})
	idle := login(t, ts, 4)
	if err := ts.shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	idle.expectError(proto.ErrCodeShuttingDown)
}

// TestShutdownWithoutStart checks that a server New bound but never started
// (Start failed, or the caller gave up) can still be shut down: promptly,
// with both listeners closed.
func TestShutdownWithoutStart(t *testing.T) {
	t.Parallel()
	o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Sets: 2, Ring: 64, Loops: 1, Data: t.TempDir()}
	o.Fill()
	s, err := server.New(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{s.Addrs()[0].String(), s.AdminAddr()}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTime)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitTime):
		t.Fatalf("Shutdown of a server never started still running after %v", waitTime)
	}
	for _, a := range addrs {
		if nc, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			nc.Close()
			t.Errorf("%s still accepts connections after Shutdown", a)
		}
	}
}

// TestTrailingBytesAndFlagsIgnored checks docs/PROTOCOL.md's room for later
// versions: bytes after a type's fields, up to len, are ignored, and so are
// the flags but the request id's (on LOGIN, PING and CHAT that one too).
func TestTrailingBytesAndFlagsIgnored(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	extra := []byte("future fields")
	// with appends extra to frame, fixing len, and sets the flags byte:
	// every bit but FlagRequestID on a SHAKE, OPEN or SEND.
	with := func(frame []byte) []byte {
		f := append(append([]byte(nil), frame...), extra...)
		binary.BigEndian.PutUint16(f, uint16(len(f)))
		f[3] = 0xff
		if t := proto.Type(f[2]); t == proto.Shake || t == proto.Open || t == proto.Send {
			f[3] &^= proto.FlagRequestID
		}
		return f
	}
	c := dial(t, ts)
	c.user = 1
	c.send(with(proto.AppendLogin(nil, 1, 1, nil)))
	if st, u := c.expect(proto.LoginAck, 1).LoginAck(); st != proto.LoginOK || u != 1 {
		t.Fatalf("LOGIN_ACK status %d user %d; want 0, 1", st, u)
	}
	peer := login(t, ts, 2)

	c.send(with(proto.AppendPing(nil, 2)))
	c.expect(proto.Pong, 2)
	c.send(with(proto.AppendShake(nil, 3)))
	if st, _, _ := c.answer(3).ShakeResult(); st != proto.ShakeNothing {
		t.Errorf("SHAKE_RESULT status %d; want 0", st)
	}
	c.send(with(proto.AppendOpen(nil, 4, 12345)))
	if st, env, _ := c.answer(4).OpenResult(); st != proto.OpenNoSuch || env != 12345 {
		t.Errorf("OPEN_RESULT status %d envelope %d; want 3, 12345", st, env)
	}
	c.send(with(proto.AppendChat(nil, 5, 2, []byte("just this"))))
	if st, _ := c.answer(5).ChatAck(); st != proto.ChatHanded {
		t.Errorf("CHAT_ACK status %d; want 0", st)
	}
	d := peer.push(proto.ChatDeliver)
	if from, text := d.ChatDeliver(); from != 1 || string(text) != "just this" || len(d.Body) != 6+len(text) {
		t.Errorf("CHAT_DELIVER from %d text %q, %d body bytes; want from 1 \"just this\" and nothing after it", from, text, len(d.Body))
	}
	c.send(with(proto.AppendSend(nil, 6, 10, []uint32{2})))
	if st, _ := c.answer(6).SendAck(); st != proto.SendOK {
		t.Errorf("SEND_ACK status %d; want 0", st)
	}
	if _, _, total, n := peer.push(proto.Envelope).Envelope(); total != 10 || n != 1 {
		t.Errorf("ENVELOPE total %d shares %d; want 10, 1", total, n)
	}
}

// TestShutdownDuringLogins checks that a LOGIN racing the shutdown cannot
// slip past it: every connection gets ERROR 8 (after its LOGIN_ACK, if its
// LOGIN got in) then EOF, and Shutdown does not wait for stragglers.
func TestShutdownDuringLogins(t *testing.T) {
	const rounds, conns = 4, 500
	for round := range rounds {
		ts := startServer(t, nil)
		cs := make([]*client, conns)
		for i := range cs {
			cs[i] = dial(t, ts)
			cs[i].user = uint32(i + 1)
		}
		// Every connection accepted: this test is about LOGINs, not accepts.
		waitFor(t, "every connection accepted", func() bool { return ts.Stats().Connections == conns })
		// The LOGINs stream in, 10 a millisecond, from before Shutdown starts
		// until after it has closed the connections that never logged in.
		started := make(chan struct{})
		go func() {
			for i, c := range cs {
				if i == 50 {
					close(started)
				}
				if i%10 == 9 {
					time.Sleep(time.Millisecond) // pacing, not waiting for anything
				}
				c.c.Send(proto.AppendLogin(nil, 1, c.user, nil)) // fails once the server closed it
			}
		}()
		<-started
		start := time.Now()
		if err := ts.shutdown(); err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
		took := time.Since(start)
		if took > 3*time.Second {
			t.Errorf("round %d: Shutdown took %v; want no wait for connections that were never told", round, took)
		}
		acked := 0
		for _, c := range cs {
			f := c.next()
			if f.Type == proto.LoginAck {
				if st, _ := f.LoginAck(); st != proto.LoginOK {
					t.Fatalf("round %d user %d: LOGIN_ACK status %d; want 0", round, c.user, st)
				}
				acked++
				f = c.next()
			}
			if f.Type != proto.Error || f.ErrorCode() != proto.ErrCodeShuttingDown {
				t.Fatalf("round %d user %d: got %s after %d LOGIN_ACKs; want ERROR 8", round, c.user, describe(f), acked)
			}
			c.expectClosed()
		}
		t.Logf("round %d: %d of %d logged in before the shutdown; Shutdown took %v", round, acked, conns, took)
	}
}

// TestShutdownDuringAccepts checks connections that arrive as the shutdown
// begins, each sending its LOGIN at once: one the server accepted gets ERROR
// 8 (after its LOGIN_ACK, if its LOGIN got in) then EOF; one it never
// accepted may just be closed; and Shutdown does not wait for stragglers.
func TestShutdownDuringAccepts(t *testing.T) {
	for _, mode := range []string{"epoll", "netpoll"} {
		t.Run(mode, func(t *testing.T) {
			for round := range 6 {
				shutdownDuringAccepts(t, mode, round)
			}
		})
	}
}

func shutdownDuringAccepts(t *testing.T, mode string, round int) {
	ts := startServer(t, func(o *server.Options) { o.Ingress = mode })
	const conns = 300
	type dialed struct {
		c   *wire.Conn
		err error
	}
	out := make(chan dialed, conns)
	started := make(chan struct{})
	go func() {
		for i := range conns {
			if i == 50 {
				close(started)
			}
			c, err := wire.Dial(ts.addr, time.Second)
			if err == nil {
				c.Send(proto.AppendLogin(nil, 1, uint32(i+1), nil)) // fails once the server closed it
			}
			out <- dialed{c, err}
		}
		close(out)
	}()
	<-started
	start := time.Now()
	if err := ts.shutdown(); err != nil {
		t.Fatalf("round %d: Shutdown: %v", round, err)
	}
	took := time.Since(start)
	if took > 3*time.Second {
		t.Errorf("round %d: Shutdown took %v; want no wait for connections that were never told", round, took)
	}
	var acked, told, dropped, refused int
	for d := range out {
		if d.err != nil {
			refused++
			continue
		}
		c := &client{t: t, c: d.c, early: map[uint64]proto.Frame{}}
		f, err := c.c.Next(waitTime)
		switch {
		case err != nil && isClosed(err):
			dropped++ // closed before the server accepted it, or before it could write
		case err != nil:
			t.Fatalf("round %d: %v; want a frame or the close", round, err)
		case f.Type == proto.LoginAck:
			acked++
			c.expectError(proto.ErrCodeShuttingDown)
		case f.Type == proto.Error && f.ErrorCode() == proto.ErrCodeShuttingDown:
			told++
			c.expectClosed()
		default:
			t.Fatalf("round %d: got %s; want LOGIN_ACK or ERROR 8", round, describe(f))
		}
		d.c.Close()
	}
	t.Logf("round %d: Shutdown took %v; %d logged in, %d told before login, %d dropped, %d refused",
		round, took, acked, told, dropped, refused)
}
