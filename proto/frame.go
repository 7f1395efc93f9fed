package proto

// Frame sizes.
const (
	// HeaderLen is the size of the header that starts every frame: len u16, type u8, flags u8,
	// stamp u64.
	HeaderLen = 12

	// MaxFrameLen is the largest len a frame may have, header included.
	MaxFrameLen = 4096

	// MaxChatText is the largest text_len of a CHAT or CHAT_DELIVER.
	MaxChatText = 1024

	// MaxTokenLen is the longest LOGIN token that fits in MaxFrameLen. With an auth secret
	// the server only accepts TokenLen.
	MaxTokenLen = MaxFrameLen - HeaderLen - 6

	// MaxSendRecipients is the most SEND recipients that fit in MaxFrameLen. The server's
	// own limit is lower (a flag, 100 by default); above it SEND is answered SendInvalid.
	MaxSendRecipients = (MaxFrameLen - HeaderLen - 6) / 4
)

// Whole-frame sizes of the fixed-size types, so callers can reserve output space.
const (
	ShakeLen       = HeaderLen
	OpenLen        = HeaderLen + 8
	PingLen        = HeaderLen
	LoginAckLen    = HeaderLen + 1 + 4 // LOGIN_ACK with any status but LoginWrongGateway
	ShakeResultLen = HeaderLen + 1 + 8 + 4
	OpenResultLen  = HeaderLen + 1 + 8 + 4
	SendAckLen     = HeaderLen + 1 + 8
	EnvelopeLen    = HeaderLen + 8 + 4 + 4 + 2
	ChatAckLen     = HeaderLen + 1 + 4
	PongLen        = HeaderLen
	ErrorLen       = HeaderLen + 1
)

// LoginLen returns the size of a LOGIN frame carrying a token of tokenLen bytes.
func LoginLen(tokenLen int) int { return HeaderLen + 6 + tokenLen }

// LoginRedirectLen returns the size of a LOGIN_ACK LoginWrongGateway frame carrying an address
// of addrLen bytes.
func LoginRedirectLen(addrLen int) int { return LoginAckLen + 1 + addrLen }

// MaxRedirectAddr is the longest address a LOGIN_ACK LoginWrongGateway carries (its length is
// a u8).
const MaxRedirectAddr = 255

// SendLen returns the size of a SEND frame with n recipients.
func SendLen(n int) int { return HeaderLen + 6 + 4*n }

// ChatLen returns the size of a CHAT or CHAT_DELIVER frame carrying textLen bytes of text.
func ChatLen(textLen int) int { return HeaderLen + 6 + textLen }

// Type is the message type in byte 2 of the header.
type Type uint8

// Client-to-server types, decoded by NextRequest.
const (
	Login Type = 0x01
	Shake Type = 0x02
	Open  Type = 0x03
	Send  Type = 0x04
	Chat  Type = 0x05
	Ping  Type = 0x06
)

// Server-to-client types, decoded by NextResponse.
const (
	LoginAck    Type = 0x81
	ShakeResult Type = 0x82
	OpenResult  Type = 0x83
	SendAck     Type = 0x84
	Envelope    Type = 0x85 // push: a group envelope for this user
	ChatDeliver Type = 0x86 // push: a chat message for this user
	ChatAck     Type = 0x87
	Pong        Type = 0x88
	Error       Type = 0xFF // the server closes the connection after it
)

// String returns the protocol's name for t (LOGIN, SHAKE_RESULT, …) or Type(0xNN).
func (t Type) String() string {
	switch t {
	case Login:
		return "LOGIN"
	case Shake:
		return "SHAKE"
	case Open:
		return "OPEN"
	case Send:
		return "SEND"
	case Chat:
		return "CHAT"
	case Ping:
		return "PING"
	case LoginAck:
		return "LOGIN_ACK"
	case ShakeResult:
		return "SHAKE_RESULT"
	case OpenResult:
		return "OPEN_RESULT"
	case SendAck:
		return "SEND_ACK"
	case Envelope:
		return "ENVELOPE"
	case ChatDeliver:
		return "CHAT_DELIVER"
	case ChatAck:
		return "CHAT_ACK"
	case Pong:
		return "PONG"
	case Error:
		return "ERROR"
	}
	const hex = "0123456789abcdef"
	return "Type(0x" + string([]byte{hex[t>>4], hex[t&15]}) + ")"
}

// LOGIN_ACK status.
const (
	LoginOK          uint8 = 0
	LoginBadToken    uint8 = 1 // bad or expired token
	LoginInvalidUser uint8 = 2 // user 0, reserved for the system

	// LoginWrongGateway: in a cluster, this gateway does not own the user. The body goes on
	// with addr_len u8 · addr, the client address (host:port) of the gateway that does, empty
	// when that owner is not known right now; the server then closes the connection.
	LoginWrongGateway uint8 = 3
)

// SHAKE_RESULT status.
const (
	ShakeNothing    uint8 = 0 // the pool is empty: envelope 0, amount 0
	ShakeGot        uint8 = 1
	ShakeOverloaded uint8 = 2 // try later
	ShakeExpired    uint8 = 3 // the request id is outside the server's window, or named another request: nothing done
)

// OPEN_RESULT status.
const (
	OpenOK           uint8 = 0 // amount is your share
	OpenAlready      uint8 = 1 // amount is the share you got earlier
	OpenNotRecipient uint8 = 2
	OpenNoSuch       uint8 = 3
	OpenNoShares     uint8 = 4
	OpenOverloaded   uint8 = 5
	OpenExpired      uint8 = 6 // the request id is outside the server's window, or named another request: nothing done
)

// SEND_ACK status.
const (
	SendOK         uint8 = 0 // envelope is the new envelope's id
	SendInvalid    uint8 = 1 // outside the server's limits on n and total, or a bad recipient
	SendOverloaded uint8 = 2
	SendLimited    uint8 = 3 // over the sender's SEND rate or live-envelope cap, or the server's envelope budget: try later
	SendExpired    uint8 = 4 // the request id is outside the server's window, or named another request: nothing done
)

// CHAT_ACK status.
const (
	ChatHanded     uint8 = 0 // handed to the recipient's connection
	ChatOffline    uint8 = 1 // recipient not connected
	ChatOverloaded uint8 = 2 // not delivered: a ring was full, the CHAT waited too long, or the recipient's backlog is full
	ChatLimited    uint8 = 3 // over the sender's CHAT rate: not delivered; try later
)

// ERROR codes. The server closes the connection after sending ERROR.
const (
	ErrCodeMalformed    uint8 = 1 // len, body or text_len wrong for the type; a second LOGIN
	ErrCodeUnknownType  uint8 = 2
	ErrCodeNotLoggedIn  uint8 = 3 // a frame other than LOGIN came first
	ErrCodeTooLarge     uint8 = 4 // len above MaxFrameLen
	ErrCodeReplaced     uint8 = 5 // a newer LOGIN for the same user won
	ErrCodeTooSlow      uint8 = 6 // output backlog over its limit
	ErrCodeLoginTimeout uint8 = 7
	ErrCodeShuttingDown uint8 = 8
	ErrCodeMoved        uint8 = 9 // the gateway no longer serves the user's SET: reconnect and LOGIN again
)

// Frame is one decoded frame.
//
// Body is the bytes after the header up to len. A Frame returned by NextRequest or NextResponse
// aliases the decoded buffer and is valid only until the caller reuses that buffer. Its
// capacity ends at len, so appending to Body never overwrites the next frame.
type Frame struct {
	Type  Type
	Flags uint8 // 0 when sent; kept for inspection, never interpreted
	Stamp uint64
	Body  []byte
}
