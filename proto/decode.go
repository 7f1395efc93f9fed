package proto

import "fmt"

// Violation is the error NextRequest and NextResponse return for bytes that can never become a
// well-formed frame. The decoders return only preallocated Violations, so the error path does
// not allocate either; compare Code, not the pointer.
type Violation struct {
	Code   uint8  // ERROR code the server answers with: ErrCodeMalformed, …
	Reason string // what was wrong, for logs
}

// Error implements error.
func (v *Violation) Error() string {
	return fmt.Sprintf("proto: %s (ERROR %d)", v.Reason, v.Code)
}

// NextRequest parses the client-to-server frame at the start of buf.
//
// It returns n > 0 and the frame when buf[:n] is a complete, well-formed frame; n == 0 and a
// nil error when buf is a prefix of a frame that may still be well-formed (read more and call
// again); and a *Violation when it can never be. f.Body aliases buf. See the package doc for
// how early each violation is reported.
func NextRequest(buf []byte) (f Frame, n int, err error) {
	return next(buf, &requests)
}

// NextResponse parses the server-to-client frame at the start of buf, with the same contract
// as NextRequest.
func NextResponse(buf []byte) (f Frame, n int, err error) {
	return next(buf, &responses)
}

// countOff is the body offset of the u16 that counts the variable part of every type that has
// one (LOGIN token_len, SEND n, CHAT and CHAT_DELIVER text_len); init checks the tables agree.
const countOff = 4

// layout is what the decoder knows of one type in one direction.
type layout struct {
	known bool
	fixed int // bytes of fixed fields at the start of the body
	unit  int // bytes per count of the variable part after the fixed fields; 0: none
	max   int // largest count allowed; 0: as many as len allows

	// redirect: a status u8 at body offset 0 equal to LoginWrongGateway extends the fixed
	// fields by a u8 at offset redirectOff that counts the address bytes after it.
	redirect bool

	// requestID: FlagRequestID in the header's flags extends the fields by a u64 after them.
	requestID bool

	// Preformatted, so that reporting them does not allocate.
	unknown, short, overrun, tooMany, redirectShort, redirectOverrun, noRequestID Violation
}

// redirectOff is the body offset of addr_len in a LOGIN_ACK LoginWrongGateway.
const redirectOff = 1 + 4

// requests and responses are indexed by type; a zero entry is an unknown type.
var requests = [256]layout{
	Login: {known: true, fixed: 6, unit: 1},
	Shake: {known: true, requestID: true},
	Open:  {known: true, fixed: 8, requestID: true},
	Send:  {known: true, fixed: 6, unit: 4, requestID: true},
	Chat:  {known: true, fixed: 6, unit: 1, max: MaxChatText},
	Ping:  {known: true},
}

var responses = [256]layout{
	LoginAck:    {known: true, fixed: 1 + 4, redirect: true},
	ShakeResult: {known: true, fixed: 1 + 8 + 4},
	OpenResult:  {known: true, fixed: 1 + 8 + 4},
	SendAck:     {known: true, fixed: 1 + 8},
	Envelope:    {known: true, fixed: 8 + 4 + 4 + 2},
	ChatDeliver: {known: true, fixed: 6, unit: 1, max: MaxChatText},
	ChatAck:     {known: true, fixed: 1 + 4},
	Pong:        {known: true},
	Error:       {known: true, fixed: 1},
}

var (
	errLenShort = &Violation{ErrCodeMalformed, fmt.Sprintf("frame len below %d", HeaderLen)}
	errLenLarge = &Violation{ErrCodeTooLarge, fmt.Sprintf("frame len above %d", MaxFrameLen)}
)

func init() {
	fill := func(tab *[256]layout, dir string) {
		for i := range tab {
			t, l := Type(i), &tab[i]
			if !l.known {
				l.unknown = Violation{ErrCodeUnknownType, fmt.Sprintf("%v is not a %s type", t, dir)}
				continue
			}
			if l.unit != 0 && l.fixed != countOff+2 {
				panic(fmt.Sprintf("BUG: %v: variable part counted at body offset %d, want %d", t, l.fixed-2, countOff))
			}
			l.short = Violation{ErrCodeMalformed, fmt.Sprintf("%v body shorter than its %d fixed bytes", t, l.fixed)}
			l.overrun = Violation{ErrCodeMalformed, fmt.Sprintf("%v count at body offset %d runs past len", t, countOff)}
			l.tooMany = Violation{ErrCodeMalformed, fmt.Sprintf("%v count above %d", t, l.max)}
			l.noRequestID = Violation{ErrCodeMalformed, fmt.Sprintf("%v flags a request id its len has no room for", t)}
			if l.redirect {
				l.redirectShort = Violation{ErrCodeMalformed, fmt.Sprintf("%v status %d body shorter than its %d fixed bytes", t, LoginWrongGateway, redirectOff+1)}
				l.redirectOverrun = Violation{ErrCodeMalformed, fmt.Sprintf("%v status %d addr_len at body offset %d runs past len", t, LoginWrongGateway, redirectOff)}
			}
		}
	}
	fill(&requests, "request")
	fill(&responses, "response")
}

// next runs the checks in the order of the bytes they need, so a violation is reported as soon
// as it is certain and at the same check however the stream is split.
func next(buf []byte, tab *[256]layout) (Frame, int, error) {
	if len(buf) < 2 {
		return Frame{}, 0, nil
	}
	n := int(be.Uint16(buf))
	if n < HeaderLen {
		return Frame{}, 0, errLenShort
	}
	if n > MaxFrameLen {
		return Frame{}, 0, errLenLarge
	}
	if len(buf) < 3 {
		return Frame{}, 0, nil
	}
	t := Type(buf[2])
	l := &tab[t]
	if !l.known {
		return Frame{}, 0, &l.unknown
	}
	body := n - HeaderLen
	if body < l.fixed {
		return Frame{}, 0, &l.short
	}
	fields := l.fixed
	if l.unit != 0 {
		if len(buf) < HeaderLen+countOff+2 {
			return Frame{}, 0, nil
		}
		count := int(be.Uint16(buf[HeaderLen+countOff:]))
		if l.max != 0 && count > l.max {
			return Frame{}, 0, &l.tooMany
		}
		if fields += count * l.unit; fields > body {
			return Frame{}, 0, &l.overrun
		}
	}
	if l.requestID {
		if len(buf) < 4 {
			return Frame{}, 0, nil
		}
		if buf[3]&FlagRequestID != 0 && fields+RequestIDLen > body {
			return Frame{}, 0, &l.noRequestID
		}
	}
	if l.redirect {
		if len(buf) < HeaderLen+1 {
			return Frame{}, 0, nil
		}
		if buf[HeaderLen] == LoginWrongGateway {
			if body < redirectOff+1 {
				return Frame{}, 0, &l.redirectShort
			}
			if len(buf) < HeaderLen+redirectOff+1 {
				return Frame{}, 0, nil
			}
			if redirectOff+1+int(buf[HeaderLen+redirectOff]) > body {
				return Frame{}, 0, &l.redirectOverrun
			}
		}
	}
	if len(buf) < n {
		return Frame{}, 0, nil
	}
	return Frame{
		Type:  t,
		Flags: buf[3],
		Stamp: be.Uint64(buf[4:]),
		Body:  buf[HeaderLen:n:n],
	}, n, nil
}
