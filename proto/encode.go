package proto

import (
	"fmt"
	"slices"
)

// The Append functions append one whole frame to dst and return the extended slice, like
// strconv.AppendInt. They grow dst at most once and allocate nothing when dst has room for the
// frame (see the *Len constants and functions). Flags are always 0.
//
// Bodies a caller cannot make too long have no checks. The variable-size ones panic when the
// variable part does not fit its u16 count or MaxFrameLen: writing a frame every decoder
// rejects is a bug in the caller, and the server only ever encodes text it has decoded.

// appendHeader grows dst once for the whole n-byte frame and appends its header.
func appendHeader(dst []byte, n int, t Type, stamp uint64) []byte {
	dst = slices.Grow(dst, n)
	dst = be.AppendUint16(dst, uint16(n))
	dst = append(dst, byte(t), 0)
	return be.AppendUint64(dst, stamp)
}

// AppendLogin appends a LOGIN frame: user u32 · token_len u16 · token. It panics if
// len(token) > MaxTokenLen.
func AppendLogin(dst []byte, stamp uint64, user uint32, token []byte) []byte {
	if len(token) > MaxTokenLen {
		panic(fmt.Sprintf("proto: AppendLogin: token of %d bytes, above MaxTokenLen %d", len(token), MaxTokenLen))
	}
	dst = appendHeader(dst, LoginLen(len(token)), Login, stamp)
	dst = be.AppendUint32(dst, user)
	dst = be.AppendUint16(dst, uint16(len(token)))
	return append(dst, token...)
}

// AppendShake appends a SHAKE frame (empty body).
func AppendShake(dst []byte, stamp uint64) []byte {
	return appendHeader(dst, ShakeLen, Shake, stamp)
}

// AppendOpen appends an OPEN frame: envelope u64.
func AppendOpen(dst []byte, stamp uint64, env uint64) []byte {
	dst = appendHeader(dst, OpenLen, Open, stamp)
	return be.AppendUint64(dst, env)
}

// AppendSend appends a SEND frame: total u32 · n u16 · n × recipient u32. It panics if
// len(recipients) > MaxSendRecipients.
func AppendSend(dst []byte, stamp uint64, total uint32, recipients []uint32) []byte {
	if len(recipients) > MaxSendRecipients {
		panic(fmt.Sprintf("proto: AppendSend: %d recipients, above MaxSendRecipients %d", len(recipients), MaxSendRecipients))
	}
	dst = appendHeader(dst, SendLen(len(recipients)), Send, stamp)
	dst = be.AppendUint32(dst, total)
	dst = be.AppendUint16(dst, uint16(len(recipients)))
	for _, r := range recipients {
		dst = be.AppendUint32(dst, r)
	}
	return dst
}

// AppendChat appends a CHAT frame: to u32 · text_len u16 · text. It panics if
// len(text) > MaxChatText. It does not check that text is UTF-8.
func AppendChat(dst []byte, stamp uint64, to uint32, text []byte) []byte {
	return appendChat(dst, Chat, stamp, to, text)
}

// AppendPing appends a PING frame (empty body).
func AppendPing(dst []byte, stamp uint64) []byte {
	return appendHeader(dst, PingLen, Ping, stamp)
}

// AppendLoginAck appends a LOGIN_ACK frame: status u8 · user u32. It panics if status is
// LoginWrongGateway, whose body goes on with an address: use AppendLoginRedirect.
func AppendLoginAck(dst []byte, stamp uint64, status uint8, user uint32) []byte {
	if status == LoginWrongGateway {
		panic("proto: AppendLoginAck: status LoginWrongGateway needs an address: use AppendLoginRedirect")
	}
	dst = appendHeader(dst, LoginAckLen, LoginAck, stamp)
	dst = append(dst, status)
	return be.AppendUint32(dst, user)
}

// AppendLoginRedirect appends a LOGIN_ACK frame with status LoginWrongGateway: status u8 ·
// user u32 · addr_len u8 · addr. addr is the client address (host:port) of the gateway that
// owns user, or empty when that owner is not known right now. It panics if
// len(addr) > MaxRedirectAddr.
func AppendLoginRedirect(dst []byte, stamp uint64, user uint32, addr string) []byte {
	if len(addr) > MaxRedirectAddr {
		panic(fmt.Sprintf("proto: AppendLoginRedirect: address of %d bytes, above MaxRedirectAddr %d", len(addr), MaxRedirectAddr))
	}
	dst = appendHeader(dst, LoginRedirectLen(len(addr)), LoginAck, stamp)
	dst = append(dst, LoginWrongGateway)
	dst = be.AppendUint32(dst, user)
	dst = append(dst, uint8(len(addr)))
	return append(dst, addr...)
}

// AppendShakeResult appends a SHAKE_RESULT frame: status u8 · envelope u64 · amount u32.
func AppendShakeResult(dst []byte, stamp uint64, status uint8, env uint64, amount uint32) []byte {
	dst = appendHeader(dst, ShakeResultLen, ShakeResult, stamp)
	dst = append(dst, status)
	dst = be.AppendUint64(dst, env)
	return be.AppendUint32(dst, amount)
}

// AppendOpenResult appends an OPEN_RESULT frame: status u8 · envelope u64 · amount u32.
func AppendOpenResult(dst []byte, stamp uint64, status uint8, env uint64, amount uint32) []byte {
	dst = appendHeader(dst, OpenResultLen, OpenResult, stamp)
	dst = append(dst, status)
	dst = be.AppendUint64(dst, env)
	return be.AppendUint32(dst, amount)
}

// AppendSendAck appends a SEND_ACK frame: status u8 · envelope u64.
func AppendSendAck(dst []byte, stamp uint64, status uint8, env uint64) []byte {
	dst = appendHeader(dst, SendAckLen, SendAck, stamp)
	dst = append(dst, status)
	return be.AppendUint64(dst, env)
}

// AppendEnvelope appends an ENVELOPE push: envelope u64 · sender u32 · total u32 · shares u16.
// Its stamp is the server's time in ns when the envelope was created.
func AppendEnvelope(dst []byte, stamp uint64, env uint64, sender, total uint32, shares uint16) []byte {
	dst = appendHeader(dst, EnvelopeLen, Envelope, stamp)
	dst = be.AppendUint64(dst, env)
	dst = be.AppendUint32(dst, sender)
	dst = be.AppendUint32(dst, total)
	return be.AppendUint16(dst, shares)
}

// AppendChatDeliver appends a CHAT_DELIVER push: from u32 · text_len u16 · text. Its stamp is
// the stamp of the CHAT that caused it. It panics if len(text) > MaxChatText.
func AppendChatDeliver(dst []byte, stamp uint64, from uint32, text []byte) []byte {
	return appendChat(dst, ChatDeliver, stamp, from, text)
}

// AppendChatAck appends a CHAT_ACK frame: status u8 · to u32.
func AppendChatAck(dst []byte, stamp uint64, status uint8, to uint32) []byte {
	dst = appendHeader(dst, ChatAckLen, ChatAck, stamp)
	dst = append(dst, status)
	return be.AppendUint32(dst, to)
}

// AppendPong appends a PONG frame (empty body).
func AppendPong(dst []byte, stamp uint64) []byte {
	return appendHeader(dst, PongLen, Pong, stamp)
}

// AppendError appends an ERROR frame: code u8.
func AppendError(dst []byte, stamp uint64, code uint8) []byte {
	dst = appendHeader(dst, ErrorLen, Error, stamp)
	return append(dst, code)
}

// appendChat appends CHAT and CHAT_DELIVER, which share a layout: user u32 · text_len u16 · text.
func appendChat(dst []byte, t Type, stamp uint64, user uint32, text []byte) []byte {
	if len(text) > MaxChatText {
		panic(fmt.Sprintf("proto: append %v: text of %d bytes, above MaxChatText %d", t, len(text), MaxChatText))
	}
	dst = appendHeader(dst, ChatLen(len(text)), t, stamp)
	dst = be.AppendUint32(dst, user)
	dst = be.AppendUint16(dst, uint16(len(text)))
	return append(dst, text...)
}
