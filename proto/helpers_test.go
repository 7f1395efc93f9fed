package proto_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/hongbao-io/hongbao/proto"
)

// nextFunc is NextRequest or NextResponse.
type nextFunc func([]byte) (proto.Frame, int, error)

// result is what a stream decoded to: its frames (bodies copied out of the buffer), the
// violation that ended it if any, and the bytes left over waiting for more.
type result struct {
	frames []proto.Frame
	err    error
	rest   []byte
}

// decodeChunks decodes the concatenation of chunks the way a connection reader does: append
// what arrived to one buffer, take every complete frame, move the remainder to the front and
// reuse the buffer. Reusing it means a frame whose Body was not copied in time would show.
func decodeChunks(next nextFunc, chunks ...[]byte) result {
	var r result
	buf := make([]byte, 0, 64)
	for _, c := range chunks {
		buf = append(buf, c...)
		for {
			f, n, err := next(buf)
			if err != nil {
				r.err = err
				return r
			}
			if n == 0 {
				break
			}
			f.Body = bytes.Clone(f.Body)
			r.frames = append(r.frames, f)
			buf = buf[:copy(buf, buf[n:])]
		}
	}
	r.rest = bytes.Clone(buf)
	return r
}

// diff describes how got differs from want, or returns "" when they are the same. Violations
// are compared by identity: the decoder must stop at the same check.
func (got result) diff(want result) string {
	if len(got.frames) != len(want.frames) {
		return fmt.Sprintf("got %d frames; want %d", len(got.frames), len(want.frames))
	}
	for i := range got.frames {
		if s := frameDiff(got.frames[i], want.frames[i]); s != "" {
			return fmt.Sprintf("frame %d: %s", i, s)
		}
	}
	if got.err != want.err {
		return fmt.Sprintf("got error %v; want %v", got.err, want.err)
	}
	if got.err == nil && !bytes.Equal(got.rest, want.rest) {
		return fmt.Sprintf("got rest %x; want %x", got.rest, want.rest)
	}
	return ""
}

func frameDiff(got, want proto.Frame) string {
	if got.Type != want.Type || got.Flags != want.Flags || got.Stamp != want.Stamp || !bytes.Equal(got.Body, want.Body) {
		return fmt.Sprintf("got %s; want %s", show(got), show(want))
	}
	return ""
}

func show(f proto.Frame) string {
	return fmt.Sprintf("{%v flags=%d stamp=%#x body=%x}", f.Type, f.Flags, f.Stamp, f.Body)
}

// reencode builds the frame f describes from its accessors and the Append functions: the
// canonical form of f, without the bytes after its fields and with flags 0.
func reencode(f proto.Frame) []byte {
	switch f.Type {
	case proto.Login:
		user, token := f.Login()
		return proto.AppendLogin(nil, f.Stamp, user, token)
	case proto.Shake:
		return proto.AppendShakeID(nil, f.Stamp, f.RequestID())
	case proto.Open:
		return proto.AppendOpenID(nil, f.Stamp, f.Open(), f.RequestID())
	case proto.Send:
		total, n := f.Send()
		rs := make([]uint32, n)
		for i := range rs {
			rs[i] = f.SendRecipient(i)
		}
		return proto.AppendSendID(nil, f.Stamp, total, rs, f.RequestID())
	case proto.Chat:
		to, text := f.Chat()
		return proto.AppendChat(nil, f.Stamp, to, text)
	case proto.Ping:
		return proto.AppendPing(nil, f.Stamp)
	case proto.LoginAck:
		status, user := f.LoginAck()
		if status == proto.LoginWrongGateway {
			return proto.AppendLoginRedirect(nil, f.Stamp, user, string(f.LoginRedirect()))
		}
		return proto.AppendLoginAck(nil, f.Stamp, status, user)
	case proto.ShakeResult:
		status, env, amount := f.ShakeResult()
		return proto.AppendShakeResult(nil, f.Stamp, status, env, amount)
	case proto.OpenResult:
		status, env, amount := f.OpenResult()
		return proto.AppendOpenResult(nil, f.Stamp, status, env, amount)
	case proto.SendAck:
		status, env := f.SendAck()
		return proto.AppendSendAck(nil, f.Stamp, status, env)
	case proto.Envelope:
		env, sender, total, shares := f.Envelope()
		return proto.AppendEnvelope(nil, f.Stamp, env, sender, total, shares)
	case proto.ChatDeliver:
		from, text := f.ChatDeliver()
		return proto.AppendChatDeliver(nil, f.Stamp, from, text)
	case proto.ChatAck:
		status, to := f.ChatAck()
		return proto.AppendChatAck(nil, f.Stamp, status, to)
	case proto.Pong:
		return proto.AppendPong(nil, f.Stamp)
	case proto.Error:
		return proto.AppendError(nil, f.Stamp, f.ErrorCode())
	}
	panic(fmt.Sprintf("reencode: unexpected %v", f.Type))
}

// header builds the 12-byte header of a frame of n bytes.
func header(n int, t proto.Type, flags uint8, stamp uint64) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(n))
	b = append(b, byte(t), flags)
	return binary.BigEndian.AppendUint64(b, stamp)
}

// withLen returns a copy of frame with len set to n and the bytes cut or zero-padded to n.
func withLen(frame []byte, n int) []byte {
	b := make([]byte, n)
	copy(b, frame)
	binary.BigEndian.PutUint16(b, uint16(n))
	return b
}

var (
	maxText  = []byte(strings.Repeat("红", proto.MaxChatText/3) + "x") // 1024 bytes of UTF-8
	manyRcpt = func() []uint32 {
		rs := make([]uint32, 100)
		for i := range rs {
			rs[i] = math.MaxUint32 - uint32(i)
		}
		return rs
	}()
)

// requestStream returns one of every request, with edge values, as one stream.
func requestStream() []byte {
	var b []byte
	b = proto.AppendLogin(b, 1, 42, []byte("0123456789012345678901234567890123456789"))
	b = proto.AppendLogin(b, 0, math.MaxUint32, nil)
	b = proto.AppendShake(b, math.MaxUint64)
	b = proto.AppendOpen(b, 3, math.MaxUint64)
	b = proto.AppendSend(b, 4, math.MaxUint32, manyRcpt)
	b = proto.AppendSend(b, 5, 2, []uint32{7})
	b = proto.AppendChat(b, 6, math.MaxUint32, maxText)
	b = proto.AppendChat(b, 7, 1, nil)
	b = proto.AppendPing(b, 8)
	return b
}

// responseStream returns one of every response, with edge values, as one stream.
func responseStream() []byte {
	var b []byte
	b = proto.AppendLoginAck(b, 1, proto.LoginOK, math.MaxUint32)
	b = proto.AppendLoginRedirect(b, 1, math.MaxUint32, strings.Repeat("h", proto.MaxRedirectAddr-6)+":65535")
	b = proto.AppendLoginRedirect(b, 1, 1, "")
	b = proto.AppendShakeResult(b, 2, proto.ShakeGot, math.MaxUint64, math.MaxUint32)
	b = proto.AppendShakeResult(b, 3, proto.ShakeNothing, 0, 0)
	b = proto.AppendOpenResult(b, 4, proto.OpenOverloaded, math.MaxUint64, math.MaxUint32)
	b = proto.AppendSendAck(b, 5, proto.SendOK, math.MaxUint64)
	b = proto.AppendEnvelope(b, math.MaxUint64, math.MaxUint64, math.MaxUint32, math.MaxUint32, math.MaxUint16)
	b = proto.AppendChatDeliver(b, 7, math.MaxUint32, maxText)
	b = proto.AppendChatDeliver(b, 8, 0, nil)
	b = proto.AppendChatAck(b, 9, proto.ChatOffline, math.MaxUint32)
	b = proto.AppendPong(b, 10)
	b = proto.AppendError(b, 0, proto.ErrCodeShuttingDown)
	return b
}
