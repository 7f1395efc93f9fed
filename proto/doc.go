// Package proto is the wire codec of the hongbao red-envelope protocol, shared by the server and
// the load client. It only encodes and decodes frames; what a frame means (who may send what, the
// limits of SEND, when to answer ERROR) is the server's business.
//
// # Frames
//
// Every frame, in both directions, is a 12-byte header followed by a body. All integers are
// unsigned and big-endian.
//
//	offset size field
//	0      2    len    whole frame, header included: HeaderLen (12) ≤ len ≤ MaxFrameLen (4096)
//	2      1    type   Login … Ping from a client, LoginAck … Error from the server
//	3      1    flags  FlagRequestID on a SHAKE, OPEN or SEND that carries a request id; else 0, ignored
//	4      8    stamp  chosen by the client, echoed in the answer
//	12     …    body   the fields of the type; bytes after them, up to len, are ignored
//
// The body layouts are in the Append functions. LOGIN, SEND, CHAT and CHAT_DELIVER have a fixed
// 6-byte prefix whose last field, a u16 at body offset 4, counts a variable part that follows it
// (token bytes, u32 recipients, text bytes).
// LOGIN_ACK has 5 fixed bytes, except with status LoginWrongGateway: then a u8 at body offset 5
// counts the address bytes that follow it. A SHAKE, OPEN or SEND with FlagRequestID goes on with
// a request id u64 after its fields (Frame.RequestID, AppendShakeID and the others).
//
// # Decoding contract
//
// NextRequest (client to server) and NextResponse (server to client) parse one frame from the
// start of a buffer and tell the caller which of three things holds:
//
//   - n > 0, err == nil: buf[:n] is a complete, well-formed frame. Its typed accessors
//     (Frame.Login, Frame.ShakeResult, …) cannot fail and do not allocate.
//   - n == 0, err == nil: buf is a prefix of a frame that may still turn out well-formed;
//     read more bytes and call again with the same start.
//   - err != nil (always a *Violation, n == 0): the bytes can never become a well-formed frame.
//     The Violation's Code is what the server puts in its ERROR frame before it closes.
//
// A violation is reported as soon as the bytes that prove it have arrived, not when the whole
// frame has: a bad len with 2 bytes; an unknown type, or a len too short for the type's fixed
// fields, with 3; a SHAKE or OPEN flagging a request id its len has no room for, with 4; a
// LOGIN_ACK LoginWrongGateway whose len has no room for addr_len, with 13; a count or an
// addr_len that runs past len, a text_len above MaxChatText, or a SEND flagging a request id
// its len has no room for, with 18. The checks
// run in the same order however the stream is split, so a stream decoded in pieces gives the
// same frames and the same violation as the whole stream decoded at once. A server that answers
// ERROR does not wait for the rest of a frame it has already rejected.
//
// Decoding checks the frame's form, never its meaning: status and ERROR codes, user 0, SEND
// limits, token length and UTF-8 text are for the caller. The one status the decoder reads is
// LOGIN_ACK LoginWrongGateway, because it changes the layout of the body.
//
// Frame.Body aliases buf: it is valid only until the caller reuses or overwrites that part of
// its buffer. A stage that keeps a frame longer copies what it needs.
//
// # Allocation and concurrency
//
// Decoding, the accessors and the Append functions (when dst has capacity) allocate nothing;
// errors are preallocated. All package functions are safe for concurrent use. A Verifier is not:
// keep one per event loop.
package proto
