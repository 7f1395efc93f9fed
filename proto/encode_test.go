package proto_test

import (
	"bytes"
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

// TestAppendWireBytes pins every frame to bytes written out by hand from docs/PROTOCOL.md, so a
// mistake made the same way in the encoder and the decoder cannot hide behind a round trip.
func TestAppendWireBytes(t *testing.T) {
	const stamp = 0x0102030405060708
	f := func(got []byte, want string) {
		t.Helper()
		want = "707265" + strings.ReplaceAll(want, " ", "") // every frame is appended after "pre"
		if g := hex.EncodeToString(got); g != want {
			t.Errorf("got %s; want %s", g, want)
		}
		// The accessors read back what the hand-written bytes hold: reencode uses them all.
		frame := got[3:]
		next := proto.NextRequest
		if frame[2]&0x80 != 0 {
			next = proto.NextResponse
		}
		if fr, n, err := next(frame); n != len(frame) || err != nil {
			t.Errorf("%x: got n=%d err=%v; want n=%d err=nil", frame, n, err, len(frame))
		} else if re := reencode(fr); !bytes.Equal(re, frame) {
			t.Errorf("%v: accessors give %x; want %x", fr.Type, re, frame)
		}
	}
	pre := func() []byte { return []byte("pre") }
	const S = "0102030405060708"

	f(proto.AppendLogin(pre(), stamp, 0xa1a2a3a4, []byte("xy")), "0014 01 00"+S+"a1a2a3a4 0002 7879")
	f(proto.AppendShake(pre(), stamp), "000c 02 00"+S)
	f(proto.AppendOpen(pre(), stamp, 0x1112131415161718), "0014 03 00"+S+"1112131415161718")
	f(proto.AppendSend(pre(), stamp, 20000, []uint32{0xb1b2b3b4, 7}), "001a 04 00"+S+"00004e20 0002 b1b2b3b4 00000007")
	f(proto.AppendChat(pre(), stamp, 0xc1c2c3c4, []byte("hi")), "0014 05 00"+S+"c1c2c3c4 0002 6869")
	f(proto.AppendPing(pre(), stamp), "000c 06 00"+S)
	f(proto.AppendLoginAck(pre(), stamp, proto.LoginInvalidUser, 0xa1a2a3a4), "0011 81 00"+S+"02 a1a2a3a4")
	f(proto.AppendLoginRedirect(pre(), stamp, 0xa1a2a3a4, "b:7"), "0015 81 00"+S+"03 a1a2a3a4 03 623a37")
	f(proto.AppendLoginRedirect(pre(), stamp, 0xa1a2a3a4, ""), "0012 81 00"+S+"03 a1a2a3a4 00")
	f(proto.AppendShakeResult(pre(), stamp, proto.ShakeGot, 0x1112131415161718, 100), "0019 82 00"+S+"01 1112131415161718 00000064")
	f(proto.AppendOpenResult(pre(), stamp, proto.OpenOverloaded, 0x1112131415161718, 100), "0019 83 00"+S+"05 1112131415161718 00000064")
	f(proto.AppendSendAck(pre(), stamp, proto.SendOK, 0x1112131415161718), "0015 84 00"+S+"00 1112131415161718")
	f(proto.AppendEnvelope(pre(), stamp, 0x1112131415161718, 0xa1a2a3a4, 20000, 100), "001e 85 00"+S+"1112131415161718 a1a2a3a4 00004e20 0064")
	f(proto.AppendChatDeliver(pre(), stamp, 0xa1a2a3a4, []byte("hi")), "0014 86 00"+S+"a1a2a3a4 0002 6869")
	f(proto.AppendChatAck(pre(), stamp, proto.ChatOffline, 0xc1c2c3c4), "0011 87 00"+S+"01 c1c2c3c4")
	f(proto.AppendPong(pre(), stamp), "000c 88 00"+S)
	f(proto.AppendError(pre(), stamp, proto.ErrCodeShuttingDown), "000d ff 00"+S+"08")
}

func TestFixedLens(t *testing.T) {
	f := func(name string, frame []byte, want int) {
		t.Helper()
		if len(frame) != want {
			t.Errorf("%s: got %d bytes; the constant says %d", name, len(frame), want)
		}
	}
	f("SHAKE", proto.AppendShake(nil, 0), proto.ShakeLen)
	f("OPEN", proto.AppendOpen(nil, 0, 0), proto.OpenLen)
	f("PING", proto.AppendPing(nil, 0), proto.PingLen)
	f("LOGIN_ACK", proto.AppendLoginAck(nil, 0, 0, 0), proto.LoginAckLen)
	f("SHAKE_RESULT", proto.AppendShakeResult(nil, 0, 0, 0, 0), proto.ShakeResultLen)
	f("SHAKE_RESULT", proto.AppendShakeResult(nil, 0, 0, 0, 0), 25)
	f("OPEN_RESULT", proto.AppendOpenResult(nil, 0, 0, 0, 0), proto.OpenResultLen)
	f("SEND_ACK", proto.AppendSendAck(nil, 0, 0, 0), proto.SendAckLen)
	f("ENVELOPE", proto.AppendEnvelope(nil, 0, 0, 0, 0, 0), proto.EnvelopeLen)
	f("CHAT_ACK", proto.AppendChatAck(nil, 0, 0, 0), proto.ChatAckLen)
	f("PONG", proto.AppendPong(nil, 0), proto.PongLen)
	f("ERROR", proto.AppendError(nil, 0, 0), proto.ErrorLen)
	f("LOGIN", proto.AppendLogin(nil, 0, 0, make([]byte, proto.TokenLen)), proto.LoginLen(proto.TokenLen))
	f("SEND", proto.AppendSend(nil, 0, 0, manyRcpt), proto.SendLen(len(manyRcpt)))
	f("CHAT", proto.AppendChat(nil, 0, 0, maxText), proto.ChatLen(proto.MaxChatText))
	f("CHAT_DELIVER", proto.AppendChatDeliver(nil, 0, 0, maxText), proto.ChatLen(proto.MaxChatText))
	f("LOGIN_ACK 3", proto.AppendLoginRedirect(nil, 0, 0, "127.0.0.1:7001"), proto.LoginRedirectLen(len("127.0.0.1:7001")))
	f("largest LOGIN", proto.AppendLogin(nil, 0, 0, make([]byte, proto.MaxTokenLen)), proto.MaxFrameLen)
	f("largest SEND", proto.AppendSend(nil, 0, 0, make([]uint32, proto.MaxSendRecipients)), proto.MaxFrameLen-2)
}

// TestRoundTrip appends every type with edge values, decodes it and reads it back.
func TestRoundTrip(t *testing.T) {
	f := func(next nextFunc, frame []byte, stamp uint64, get func(proto.Frame) []any, want ...any) {
		t.Helper()
		fr, n, err := next(frame)
		if err != nil || n != len(frame) {
			t.Fatalf("got n=%d err=%v; want n=%d err=nil", n, err, len(frame))
		}
		if fr.Stamp != stamp || fr.Flags != 0 {
			t.Errorf("%v: got stamp=%#x flags=%d; want stamp=%#x flags=0", fr.Type, fr.Stamp, fr.Flags, stamp)
		}
		if got := get(fr); !reflect.DeepEqual(got, want) {
			t.Errorf("%v: got %v; want %v", fr.Type, got, want)
		}
		if re := reencode(fr); !bytes.Equal(re, frame) {
			t.Errorf("%v: re-encoded to %x; want %x", fr.Type, re, frame)
		}
	}
	const maxU32, maxU64 = math.MaxUint32, math.MaxUint64
	token := proto.MintToken(nil, []byte("k"), maxU32, math.MaxInt64)
	req, resp := proto.NextRequest, proto.NextResponse

	login := func(f proto.Frame) []any { u, tok := f.Login(); return []any{u, tok} }
	f(req, proto.AppendLogin(nil, maxU64, maxU32, token), maxU64, login, uint32(maxU32), token)
	f(req, proto.AppendLogin(nil, 0, 1, nil), 0, login, uint32(1), []byte{})
	f(req, proto.AppendShake(nil, maxU64), maxU64, func(proto.Frame) []any { return nil })
	f(req, proto.AppendOpen(nil, 1, maxU64), 1, func(f proto.Frame) []any { return []any{f.Open()} }, uint64(maxU64))
	send := func(f proto.Frame) []any {
		total, n := f.Send()
		rs := make([]uint32, n)
		for i := range rs {
			rs[i] = f.SendRecipient(i)
		}
		return []any{total, rs}
	}
	f(req, proto.AppendSend(nil, 2, maxU32, manyRcpt), 2, send, uint32(maxU32), manyRcpt)
	f(req, proto.AppendSend(nil, 2, 0, nil), 2, send, uint32(0), []uint32{})
	chat := func(f proto.Frame) []any { to, text := f.Chat(); return []any{to, text} }
	f(req, proto.AppendChat(nil, 3, maxU32, maxText), 3, chat, uint32(maxU32), maxText)
	f(req, proto.AppendChat(nil, 3, 0, nil), 3, chat, uint32(0), []byte{})
	f(req, proto.AppendPing(nil, maxU64), maxU64, func(proto.Frame) []any { return nil })

	f(resp, proto.AppendLoginAck(nil, 4, proto.LoginBadToken, maxU32), 4,
		func(f proto.Frame) []any { s, u := f.LoginAck(); return []any{s, u} }, proto.LoginBadToken, uint32(maxU32))
	redirect := func(f proto.Frame) []any { s, u := f.LoginAck(); return []any{s, u, string(f.LoginRedirect())} }
	longAddr := strings.Repeat("a", proto.MaxRedirectAddr)
	f(resp, proto.AppendLoginRedirect(nil, 4, maxU32, longAddr), 4, redirect, proto.LoginWrongGateway, uint32(maxU32), longAddr)
	f(resp, proto.AppendLoginRedirect(nil, 4, 1, ""), 4, redirect, proto.LoginWrongGateway, uint32(1), "")
	f(resp, proto.AppendShakeResult(nil, 5, proto.ShakeOverloaded, maxU64, maxU32), 5,
		func(f proto.Frame) []any { s, e, a := f.ShakeResult(); return []any{s, e, a} }, proto.ShakeOverloaded, uint64(maxU64), uint32(maxU32))
	f(resp, proto.AppendOpenResult(nil, 6, proto.OpenNoShares, maxU64, maxU32), 6,
		func(f proto.Frame) []any { s, e, a := f.OpenResult(); return []any{s, e, a} }, proto.OpenNoShares, uint64(maxU64), uint32(maxU32))
	f(resp, proto.AppendSendAck(nil, 7, proto.SendInvalid, maxU64), 7,
		func(f proto.Frame) []any { s, e := f.SendAck(); return []any{s, e} }, proto.SendInvalid, uint64(maxU64))
	f(resp, proto.AppendEnvelope(nil, maxU64, maxU64, maxU32, maxU32-1, math.MaxUint16), maxU64,
		func(f proto.Frame) []any { e, s, tot, n := f.Envelope(); return []any{e, s, tot, n} },
		uint64(maxU64), uint32(maxU32), uint32(maxU32-1), uint16(math.MaxUint16))
	deliver := func(f proto.Frame) []any { from, text := f.ChatDeliver(); return []any{from, text} }
	f(resp, proto.AppendChatDeliver(nil, 8, maxU32, maxText), 8, deliver, uint32(maxU32), maxText)
	f(resp, proto.AppendChatDeliver(nil, 8, 0, nil), 8, deliver, uint32(0), []byte{})
	f(resp, proto.AppendChatAck(nil, 9, proto.ChatOverloaded, maxU32), 9,
		func(f proto.Frame) []any { s, to := f.ChatAck(); return []any{s, to} }, proto.ChatOverloaded, uint32(maxU32))
	f(resp, proto.AppendPong(nil, maxU64), maxU64, func(proto.Frame) []any { return nil })
	f(resp, proto.AppendError(nil, 0, proto.ErrCodeTooSlow), 0,
		func(f proto.Frame) []any { return []any{f.ErrorCode()} }, proto.ErrCodeTooSlow)
}

func TestAppendPanicsWhenTooLong(t *testing.T) {
	f := func(name string, call func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if recover() == nil {
				t.Errorf("%s: got no panic; want one", name)
			}
		}()
		call()
	}
	f("AppendLogin", func() { proto.AppendLogin(nil, 0, 1, make([]byte, proto.MaxTokenLen+1)) })
	f("AppendSend", func() { proto.AppendSend(nil, 0, 1, make([]uint32, proto.MaxSendRecipients+1)) })
	f("AppendChat", func() { proto.AppendChat(nil, 0, 1, make([]byte, proto.MaxChatText+1)) })
	f("AppendChatDeliver", func() { proto.AppendChatDeliver(nil, 0, 1, make([]byte, proto.MaxChatText+1)) })
	f("AppendLoginRedirect", func() { proto.AppendLoginRedirect(nil, 0, 1, strings.Repeat("a", proto.MaxRedirectAddr+1)) })
	f("AppendLoginAck status 3", func() { proto.AppendLoginAck(nil, 0, proto.LoginWrongGateway, 1) })
}
