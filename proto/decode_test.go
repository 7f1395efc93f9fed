package proto_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

var requestTypes = []proto.Type{proto.Login, proto.Shake, proto.Open, proto.Send, proto.Chat, proto.Ping}

var responseTypes = []proto.Type{
	proto.LoginAck, proto.ShakeResult, proto.OpenResult, proto.SendAck, proto.Envelope,
	proto.ChatDeliver, proto.ChatAck, proto.Pong, proto.Error,
}

// violation checks that frame is rejected with code, that the rejection comes as soon as its
// first at bytes are there and not before, and that every longer prefix reports the same
// violation.
func violation(t *testing.T, next nextFunc, name string, frame []byte, at int, code uint8) {
	t.Helper()
	for k := 0; k < at; k++ {
		if _, n, err := next(frame[:k]); n != 0 || err != nil {
			t.Errorf("%s: with %d of %d bytes got n=%d err=%v; want n=0 err=nil (need more)", name, k, at, n, err)
			return
		}
	}
	_, n, first := next(frame[:at])
	var v *proto.Violation
	if n != 0 || !errors.As(first, &v) || v.Code != code {
		t.Errorf("%s: with %d bytes got n=%d err=%v; want n=0 and a violation with code %d", name, at, n, first, code)
		return
	}
	for k := at + 1; k <= len(frame); k++ {
		if _, n, err := next(frame[:k]); n != 0 || err != first {
			t.Errorf("%s: with %d bytes got n=%d err=%v; want n=0 err=%v", name, k, n, err, first)
			return
		}
	}
}

func TestNextLen(t *testing.T) {
	for _, next := range []nextFunc{proto.NextRequest, proto.NextResponse} {
		for n := range proto.HeaderLen {
			// The type (PING, which needs no body) is no better or worse: len decides alone.
			frame := header(n, proto.Ping, 0, 1)
			violation(t, next, "len below 12", frame, 2, proto.ErrCodeMalformed)
		}
		for _, n := range []int{proto.MaxFrameLen + 1, 0xffff} {
			frame := header(n, proto.Ping, 0, 1)
			violation(t, next, "len above 4096", frame, 2, proto.ErrCodeTooLarge)
			frame[2] = 0x42 // an unknown type too: len is checked first
			violation(t, next, "len above 4096, unknown type", frame, 2, proto.ErrCodeTooLarge)
		}
		frame := header(5, 0x42, 0, 1)
		violation(t, next, "len below 12, unknown type", frame, 2, proto.ErrCodeMalformed)
	}
}

func TestNextUnknownType(t *testing.T) {
	f := func(next nextFunc, known []proto.Type) {
		t.Helper()
		for i := range 256 {
			typ := proto.Type(i)
			frame := header(proto.MaxFrameLen, typ, 0, 1)
			frame = append(frame, make([]byte, proto.MaxFrameLen-len(frame))...)
			isKnown := false
			for _, k := range known {
				isKnown = isKnown || k == typ
			}
			if isKnown {
				// A body of zeros is long enough for every type and every count of 0.
				if _, n, err := next(frame); n != len(frame) || err != nil {
					t.Errorf("%v: got n=%d err=%v; want n=%d err=nil", typ, n, err, len(frame))
				}
				continue
			}
			violation(t, next, typ.String(), frame, 3, proto.ErrCodeUnknownType)
		}
	}
	f(proto.NextRequest, requestTypes)
	f(proto.NextResponse, responseTypes)
}

// TestNextBodyTooShort cuts the last byte off a valid frame of every type with a body.
func TestNextBodyTooShort(t *testing.T) {
	short := func(frame []byte) []byte { return withLen(frame, len(frame)-1) }
	f := func(next nextFunc, frame []byte, at int) {
		t.Helper()
		fr, _, err := next(frame)
		if err != nil {
			t.Fatalf("the uncut frame: %v", err)
		}
		violation(t, next, fr.Type.String()+" one byte short", short(frame), at, proto.ErrCodeMalformed)
	}
	const fixed, count = 3, proto.HeaderLen + 6 // where the violation shows: at the type, at the count
	req, resp := proto.NextRequest, proto.NextResponse
	f(req, proto.AppendLogin(nil, 1, 2, []byte("token")), count)
	f(req, proto.AppendLogin(nil, 1, 2, nil), fixed)
	f(req, proto.AppendOpen(nil, 1, 2), fixed)
	f(req, proto.AppendSend(nil, 1, 2, []uint32{3, 4}), count)
	f(req, proto.AppendSend(nil, 1, 2, nil), fixed)
	f(req, proto.AppendChat(nil, 1, 2, []byte("hello")), count)
	f(req, proto.AppendChat(nil, 1, 2, maxText), count)
	f(req, proto.AppendChat(nil, 1, 2, nil), fixed)
	f(resp, proto.AppendLoginAck(nil, 1, 0, 2), fixed)
	f(resp, proto.AppendLoginRedirect(nil, 1, 2, "b:1"), count)
	f(resp, proto.AppendLoginRedirect(nil, 1, 2, ""), proto.HeaderLen+1)
	f(resp, proto.AppendShakeResult(nil, 1, 0, 2, 3), fixed)
	f(resp, proto.AppendOpenResult(nil, 1, 0, 2, 3), fixed)
	f(resp, proto.AppendSendAck(nil, 1, 0, 2), fixed)
	f(resp, proto.AppendEnvelope(nil, 1, 2, 3, 4, 5), fixed)
	f(resp, proto.AppendChatDeliver(nil, 1, 2, []byte("hello")), count)
	f(resp, proto.AppendChatDeliver(nil, 1, 2, nil), fixed)
	f(resp, proto.AppendChatAck(nil, 1, 0, 2), fixed)
	f(resp, proto.AppendError(nil, 1, 2), fixed)

	// A SEND whose n needs more than len allows, in a frame of the largest len.
	frame := proto.AppendSend(nil, 1, 2, make([]uint32, proto.MaxSendRecipients))
	frame[proto.HeaderLen+5]++
	violation(t, req, "SEND n past MaxFrameLen", withLen(frame, proto.MaxFrameLen), count, proto.ErrCodeMalformed)
}

func TestNextChatTextTooLong(t *testing.T) {
	f := func(next nextFunc, typ proto.Type) {
		t.Helper()
		// Len has room for the text: text_len above 1024 is wrong by itself.
		const textLen = proto.MaxChatText + 1
		frame := header(proto.ChatLen(textLen), typ, 0, 1)
		frame = append(frame, 0, 0, 0, 2, textLen>>8, textLen&0xff)
		frame = append(frame, make([]byte, textLen)...)
		violation(t, next, typ.String()+" text_len 1025", frame, proto.HeaderLen+6, proto.ErrCodeMalformed)
		// One less is fine, even with a byte left over.
		frame[proto.HeaderLen+5]--
		if fr, n, err := next(frame); n != len(frame) || err != nil {
			t.Errorf("%v text_len 1024: got n=%d err=%v; want n=%d err=nil", typ, n, err, len(frame))
		} else if _, text := fr.Chat(); len(text) != proto.MaxChatText {
			t.Errorf("%v text_len 1024: got text of %d bytes; want %d", typ, len(text), proto.MaxChatText)
		}
	}
	f(proto.NextRequest, proto.Chat)
	f(proto.NextResponse, proto.ChatDeliver)
}

// TestNextIgnoresTrailingBytesAndFlags checks that bytes after a type's fields, up to len, are
// skipped and do not leak into the accessors, and that flags are accepted as they come.
func TestNextIgnoresTrailingBytesAndFlags(t *testing.T) {
	f := func(next nextFunc, frame []byte, check func(proto.Frame) bool) {
		t.Helper()
		long := append(withLen(frame, len(frame)+3), "tail of next frame"...)
		copy(long[len(frame):], "ext")
		long[3] = 0x80
		fr, n, err := next(long)
		if n != len(frame)+3 || err != nil {
			t.Fatalf("got n=%d err=%v; want n=%d err=nil", n, err, len(frame)+3)
		}
		if fr.Flags != 0x80 {
			t.Errorf("%v: got flags %#x; want 0x80", fr.Type, fr.Flags)
		}
		if len(fr.Body) != cap(fr.Body) {
			t.Errorf("%v: got body len %d cap %d; want cap == len so appends cannot reach the next frame", fr.Type, len(fr.Body), cap(fr.Body))
		}
		if !check(fr) {
			t.Errorf("%v: accessors read the trailing bytes: %s", fr.Type, show(fr))
		}
		if re := reencode(fr); !bytes.Equal(re[proto.HeaderLen:], frame[proto.HeaderLen:]) {
			t.Errorf("%v: got body %x; want %x", fr.Type, re[proto.HeaderLen:], frame[proto.HeaderLen:])
		}
	}
	f(proto.NextRequest, proto.AppendLogin(nil, 1, 2, []byte("tok")), func(fr proto.Frame) bool {
		_, tok := fr.Login()
		return string(tok) == "tok" && cap(tok) == 3
	})
	f(proto.NextRequest, proto.AppendChat(nil, 1, 2, []byte("hi")), func(fr proto.Frame) bool {
		_, text := fr.Chat()
		return string(text) == "hi" && cap(text) == 2
	})
	f(proto.NextRequest, proto.AppendSend(nil, 1, 2, []uint32{3}), func(fr proto.Frame) bool {
		_, n := fr.Send()
		return n == 1
	})
	f(proto.NextRequest, proto.AppendOpen(nil, 1, 2), func(fr proto.Frame) bool { return fr.Open() == 2 })
	f(proto.NextRequest, proto.AppendShake(nil, 1), func(proto.Frame) bool { return true })
	f(proto.NextResponse, proto.AppendPong(nil, 1), func(proto.Frame) bool { return true })
	f(proto.NextResponse, proto.AppendError(nil, 1, 4), func(fr proto.Frame) bool { return fr.ErrorCode() == 4 })
	f(proto.NextResponse, proto.AppendLoginAck(nil, 1, proto.LoginOK, 2), func(fr proto.Frame) bool {
		s, u := fr.LoginAck()
		return s == proto.LoginOK && u == 2
	})
	f(proto.NextResponse, proto.AppendLoginRedirect(nil, 1, 2, "b:1"), func(fr proto.Frame) bool {
		addr := fr.LoginRedirect()
		return string(addr) == "b:1" && cap(addr) == 3
	})
}

// TestNextLoginRedirect checks the LOGIN_ACK layouts: 5 fixed bytes for every status but
// LoginWrongGateway, which needs addr_len and the address it counts.
func TestNextLoginRedirect(t *testing.T) {
	resp := proto.NextResponse
	// LOGIN_ACK 3 with only the 5 bytes of the other statuses: its addr_len is missing.
	frame := header(proto.LoginAckLen, proto.LoginAck, 0, 1)
	frame = append(frame, proto.LoginWrongGateway, 0, 0, 0, 7)
	violation(t, resp, "LOGIN_ACK 3 without addr_len", frame, proto.HeaderLen+1, proto.ErrCodeMalformed)
	// The same bytes with status 2 are a whole LOGIN_ACK.
	frame[proto.HeaderLen] = proto.LoginInvalidUser
	if _, n, err := resp(frame); n != len(frame) || err != nil {
		t.Errorf("LOGIN_ACK 2: got n=%d err=%v; want n=%d err=nil", n, err, len(frame))
	}
	// An addr_len one above what len leaves, with the bytes there (they belong to what follows).
	frame = proto.AppendLoginRedirect(nil, 1, 7, "gw-b:7001")
	frame[proto.HeaderLen+5]++
	violation(t, resp, "LOGIN_ACK 3 addr_len past len", append(frame, 'x'), proto.HeaderLen+6, proto.ErrCodeMalformed)
	// addr_len 0: the owner is not known right now.
	frame = proto.AppendLoginRedirect(nil, 1, 7, "")
	if fr, n, err := resp(frame); n != len(frame) || err != nil {
		t.Errorf("LOGIN_ACK 3 addr_len 0: got n=%d err=%v; want n=%d err=nil", n, err, len(frame))
	} else if s, u := fr.LoginAck(); s != proto.LoginWrongGateway || u != 7 || len(fr.LoginRedirect()) != 0 {
		t.Errorf("LOGIN_ACK 3 addr_len 0: got status %d user %d addr %q", s, u, fr.LoginRedirect())
	}
}

// TestNextIncremental decodes the streams one byte at a time and split at every point, and
// wants what decoding them whole gives.
func TestNextIncremental(t *testing.T) {
	f := func(name string, next nextFunc, stream []byte, wantFrames int, wantErr bool) {
		t.Helper()
		whole := decodeChunks(next, stream)
		if len(whole.frames) != wantFrames || (whole.err != nil) != wantErr {
			t.Fatalf("%s whole: got %d frames, err %v; want %d frames, error %v", name, len(whole.frames), whole.err, wantFrames, wantErr)
		}
		bytewise := make([][]byte, len(stream))
		for i := range stream {
			bytewise[i] = stream[i : i+1]
		}
		if d := decodeChunks(next, bytewise...).diff(whole); d != "" {
			t.Errorf("%s one byte at a time: %s", name, d)
		}
		for k := range len(stream) + 1 {
			if d := decodeChunks(next, stream[:k], stream[k:]).diff(whole); d != "" {
				t.Errorf("%s split at %d: %s", name, k, d)
			}
		}
		for k := 0; k < len(stream); k += 7 {
			if d := decodeChunks(next, stream[:k], stream[k:k+(len(stream)-k)/2], stream[k+(len(stream)-k)/2:]).diff(whole); d != "" {
				t.Errorf("%s split at %d and after half the rest: %s", name, k, d)
			}
		}
	}
	req, resp := requestStream(), responseStream()
	f("requests", proto.NextRequest, req, 9, false)
	f("responses", proto.NextResponse, resp, 13, false)
	f("requests twice", proto.NextRequest, append(append([]byte(nil), req...), req...), 18, false)
	f("requests and a partial frame", proto.NextRequest, append(append([]byte(nil), req...), req[:30]...), 9, false)
	f("requests then a response", proto.NextRequest, append(append([]byte(nil), req...), resp...), 9, true)
	f("responses then a request", proto.NextResponse, append(append([]byte(nil), resp...), req...), 13, true)
	f("responses then len 4097", proto.NextResponse, append(append([]byte(nil), resp...), header(4097, proto.Pong, 0, 0)...), 13, true)
}

func TestTypeString(t *testing.T) {
	f := func(typ proto.Type, want string) {
		t.Helper()
		if got := typ.String(); got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
	f(proto.Login, "LOGIN")
	f(proto.Shake, "SHAKE")
	f(proto.Open, "OPEN")
	f(proto.Send, "SEND")
	f(proto.Chat, "CHAT")
	f(proto.Ping, "PING")
	f(proto.LoginAck, "LOGIN_ACK")
	f(proto.ShakeResult, "SHAKE_RESULT")
	f(proto.OpenResult, "OPEN_RESULT")
	f(proto.SendAck, "SEND_ACK")
	f(proto.Envelope, "ENVELOPE")
	f(proto.ChatDeliver, "CHAT_DELIVER")
	f(proto.ChatAck, "CHAT_ACK")
	f(proto.Pong, "PONG")
	f(proto.Error, "ERROR")
	f(0, "Type(0x00)")
	f(0x8a, "Type(0x8a)")
}

func TestViolationError(t *testing.T) {
	_, _, err := proto.NextRequest(header(5, proto.Ping, 0, 0))
	if got, want := err.Error(), "proto: frame len below 12 (ERROR 1)"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
	_, _, err = proto.NextRequest(header(12, proto.Pong, 0, 0))
	if got, want := err.Error(), "proto: PONG is not a request type (ERROR 2)"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}
