package proto_test

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// raceEnabled is set by race_test.go in -race builds.
var raceEnabled bool

// The decoder, the accessors, the encoders and the token check run once per message on the
// server's event loops: none of them may allocate.

func TestAllocsNext(t *testing.T) {
	f := func(name string, next nextFunc, stream []byte) {
		t.Helper()
		var sink uint64
		allocs := testing.AllocsPerRun(100, func() {
			for b := stream; len(b) > 0; {
				fr, n, err := next(b)
				if err != nil || n == 0 {
					panic("stream does not decode")
				}
				sink += readAll(fr)
				b = b[n:]
			}
		})
		if allocs != 0 {
			t.Errorf("%s: got %v allocations per stream; want 0", name, allocs)
		}
		_ = sink
	}
	f("NextRequest", proto.NextRequest, requestStream())
	f("NextResponse", proto.NextResponse, responseStream())

	// Violations are preallocated too.
	bad := header(proto.HeaderLen, proto.Pong, 0, 0)
	if allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := proto.NextRequest(bad); err == nil {
			panic("PONG accepted as a request")
		}
	}); allocs != 0 {
		t.Errorf("violation: got %v allocations; want 0", allocs)
	}
}

// readAll calls the accessors of f's type and folds what they return into a number, so the
// compiler cannot drop the calls.
func readAll(f proto.Frame) uint64 {
	switch f.Type {
	case proto.Login:
		u, tok := f.Login()
		return uint64(u) + uint64(len(tok))
	case proto.Open:
		return f.Open()
	case proto.Send:
		total, n := f.Send()
		s := uint64(total)
		for i := range n {
			s += uint64(f.SendRecipient(i))
		}
		return s
	case proto.Chat:
		to, text := f.Chat()
		return uint64(to) + uint64(len(text))
	case proto.LoginAck:
		s, u := f.LoginAck()
		if s == proto.LoginWrongGateway {
			return uint64(s) + uint64(u) + uint64(len(f.LoginRedirect()))
		}
		return uint64(s) + uint64(u)
	case proto.ShakeResult:
		s, e, a := f.ShakeResult()
		return uint64(s) + e + uint64(a)
	case proto.OpenResult:
		s, e, a := f.OpenResult()
		return uint64(s) + e + uint64(a)
	case proto.SendAck:
		s, e := f.SendAck()
		return uint64(s) + e
	case proto.Envelope:
		e, s, tot, n := f.Envelope()
		return e + uint64(s) + uint64(tot) + uint64(n)
	case proto.ChatDeliver:
		from, text := f.ChatDeliver()
		return uint64(from) + uint64(len(text))
	case proto.ChatAck:
		s, to := f.ChatAck()
		return uint64(s) + uint64(to)
	case proto.Error:
		return uint64(f.ErrorCode())
	}
	return f.Stamp
}

func TestAllocsAppend(t *testing.T) {
	dst := make([]byte, 0, proto.MaxFrameLen)
	token := make([]byte, proto.TokenLen)
	f := func(name string, appendTo func([]byte) []byte) {
		t.Helper()
		if allocs := testing.AllocsPerRun(100, func() { dst = appendTo(dst[:0]) }); allocs != 0 {
			t.Errorf("%s: got %v allocations; want 0", name, allocs)
		}
	}
	f("AppendLogin", func(b []byte) []byte { return proto.AppendLogin(b, 1, 2, token) })
	f("AppendShake", func(b []byte) []byte { return proto.AppendShake(b, 1) })
	f("AppendOpen", func(b []byte) []byte { return proto.AppendOpen(b, 1, 2) })
	f("AppendSend", func(b []byte) []byte { return proto.AppendSend(b, 1, 2, manyRcpt) })
	f("AppendChat", func(b []byte) []byte { return proto.AppendChat(b, 1, 2, maxText) })
	f("AppendPing", func(b []byte) []byte { return proto.AppendPing(b, 1) })
	f("AppendLoginAck", func(b []byte) []byte { return proto.AppendLoginAck(b, 1, 2, 3) })
	f("AppendLoginRedirect", func(b []byte) []byte { return proto.AppendLoginRedirect(b, 1, 2, "127.0.0.1:7001") })
	f("AppendShakeResult", func(b []byte) []byte { return proto.AppendShakeResult(b, 1, 2, 3, 4) })
	f("AppendOpenResult", func(b []byte) []byte { return proto.AppendOpenResult(b, 1, 2, 3, 4) })
	f("AppendSendAck", func(b []byte) []byte { return proto.AppendSendAck(b, 1, 2, 3) })
	f("AppendEnvelope", func(b []byte) []byte { return proto.AppendEnvelope(b, 1, 2, 3, 4, 5) })
	f("AppendChatDeliver", func(b []byte) []byte { return proto.AppendChatDeliver(b, 1, 2, maxText) })
	f("AppendChatAck", func(b []byte) []byte { return proto.AppendChatAck(b, 1, 2, 3) })
	f("AppendPong", func(b []byte) []byte { return proto.AppendPong(b, 1) })
	f("AppendError", func(b []byte) []byte { return proto.AppendError(b, 1, 2) })
}

// TestAllocsAppendGrowsOnce checks that an Append into a slice without room allocates once,
// for the whole frame, rather than once per field.
func TestAllocsAppendGrowsOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	f := func(name string, appendTo func([]byte) []byte) {
		t.Helper()
		if allocs := testing.AllocsPerRun(100, func() { appendTo(make([]byte, 0, 1)) }); allocs != 2 {
			t.Errorf("%s: got %v allocations into a full slice; want 2 (the slice and one growth)", name, allocs)
		}
	}
	f("AppendSend", func(b []byte) []byte { return proto.AppendSend(b, 1, 2, manyRcpt) })
	f("AppendChat", func(b []byte) []byte { return proto.AppendChat(b, 1, 2, maxText) })
	f("AppendEnvelope", func(b []byte) []byte { return proto.AppendEnvelope(b, 1, 2, 3, 4, 5) })
}

func TestAllocsVerify(t *testing.T) {
	secret := []byte("secret")
	now := time.Now().Unix()
	token := proto.MintToken(nil, secret, 7, now+60)
	forged := append([]byte(nil), token...)
	forged[len(forged)-1] ^= 1
	v := proto.NewVerifier(secret)
	f := func(name string, tok []byte, want bool) {
		t.Helper()
		got := !want
		if allocs := testing.AllocsPerRun(100, func() { got = v.Verify(7, tok, now) }); allocs != 0 {
			t.Errorf("%s: got %v allocations; want 0", name, allocs)
		}
		if got != want {
			t.Errorf("%s: got verdict %v; want %v", name, got, want)
		}
	}
	f("valid", token, true)
	f("forged", forged, false)
}
