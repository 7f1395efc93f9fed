package proto

import "encoding/binary"

// The accessors read the fields of one type's body. They do not check f.Type: call the one that
// matches it, on a frame returned by NextRequest or NextResponse, which has checked the body is
// long enough, so they cannot fail. Slices they return alias f.Body. None of them allocates.

// be is the byte order of every integer on the wire.
var be = binary.BigEndian

// Login returns the fields of a LOGIN body: user u32 · token_len u16 · token.
func (f Frame) Login() (user uint32, token []byte) {
	k := countOff + 2 + int(be.Uint16(f.Body[countOff:]))
	return be.Uint32(f.Body), f.Body[countOff+2 : k : k]
}

// Open returns the envelope of an OPEN body: envelope u64.
func (f Frame) Open() (env uint64) {
	return be.Uint64(f.Body)
}

// Send returns the head of a SEND body: total u32 · n u16. Read recipient i, 0 ≤ i < n, with
// SendRecipient.
func (f Frame) Send() (total uint32, n int) {
	return be.Uint32(f.Body), int(be.Uint16(f.Body[countOff:]))
}

// SendRecipient returns recipient i of a SEND body, 0 ≤ i < n.
func (f Frame) SendRecipient(i int) uint32 {
	return be.Uint32(f.Body[countOff+2+4*i:])
}

// Chat returns the fields of a CHAT body: to u32 · text_len u16 · text.
func (f Frame) Chat() (to uint32, text []byte) {
	k := countOff + 2 + int(be.Uint16(f.Body[countOff:]))
	return be.Uint32(f.Body), f.Body[countOff+2 : k : k]
}

// LoginAck returns the fields of a LOGIN_ACK body: status u8 · user u32.
func (f Frame) LoginAck() (status uint8, user uint32) {
	return f.Body[0], be.Uint32(f.Body[1:])
}

// LoginRedirect returns the address of a LOGIN_ACK body whose status is LoginWrongGateway:
// status u8 · user u32 · addr_len u8 · addr. The address is empty when the owner is not known
// right now. Call it only after LoginAck gave that status: other bodies have no address.
func (f Frame) LoginRedirect() (addr []byte) {
	k := 6 + int(f.Body[5])
	return f.Body[6:k:k]
}

// ShakeResult returns the fields of a SHAKE_RESULT body: status u8 · envelope u64 · amount u32.
func (f Frame) ShakeResult() (status uint8, env uint64, amount uint32) {
	return f.Body[0], be.Uint64(f.Body[1:]), be.Uint32(f.Body[9:])
}

// OpenResult returns the fields of an OPEN_RESULT body: status u8 · envelope u64 · amount u32.
func (f Frame) OpenResult() (status uint8, env uint64, amount uint32) {
	return f.Body[0], be.Uint64(f.Body[1:]), be.Uint32(f.Body[9:])
}

// SendAck returns the fields of a SEND_ACK body: status u8 · envelope u64.
func (f Frame) SendAck() (status uint8, env uint64) {
	return f.Body[0], be.Uint64(f.Body[1:])
}

// Envelope returns the fields of an ENVELOPE body: envelope u64 · sender u32 · total u32 ·
// shares u16.
func (f Frame) Envelope() (env uint64, sender, total uint32, shares uint16) {
	return be.Uint64(f.Body), be.Uint32(f.Body[8:]), be.Uint32(f.Body[12:]), be.Uint16(f.Body[16:])
}

// ChatDeliver returns the fields of a CHAT_DELIVER body: from u32 · text_len u16 · text.
func (f Frame) ChatDeliver() (from uint32, text []byte) {
	return f.Chat()
}

// ChatAck returns the fields of a CHAT_ACK body: status u8 · to u32.
func (f Frame) ChatAck() (status uint8, to uint32) {
	return f.Body[0], be.Uint32(f.Body[1:])
}

// ErrorCode returns the code of an ERROR body: code u8.
func (f Frame) ErrorCode() uint8 {
	return f.Body[0]
}
