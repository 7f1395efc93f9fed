package proto

// Request ids (docs/PROTOCOL.md, Request ids): a SHAKE, OPEN or SEND whose
// header sets FlagRequestID carries a u64 id right after its type's fields.
// The server keeps the first answer that carried money for each (user, id)
// and answers a retry with the same id with it, never a second draw.

// FlagRequestID, in a SHAKE, OPEN or SEND header's flags, says that the body
// goes on with a request id u64 after the type's fields. The other types
// ignore it.
const FlagRequestID uint8 = 0x01

// RequestIDLen is the size of a request id on the wire.
const RequestIDLen = 8

// NewRequestID returns the request id a client gives the n-th request it
// first sent in unix second sec: the second in the top 32 bits, so that a
// server can tell an id older than its window without keeping it; n in the
// low 32, distinct among the user's requests first sent in that second.
func NewRequestID(sec int64, n uint32) uint64 { return uint64(uint32(sec))<<32 | uint64(n) }

// RequestIDTime returns the unix second a request id says its request was
// first sent in.
func RequestIDTime(id uint64) int64 { return int64(id >> 32) }

// RequestID returns the request id of a SHAKE, OPEN or SEND frame, 0 when it
// carries none (flag unset, or the id 0, which is no id).
func (f Frame) RequestID() uint64 {
	if f.Flags&FlagRequestID == 0 {
		return 0
	}
	var off int
	switch f.Type {
	case Shake:
	case Open:
		off = 8
	case Send:
		off = countOff + 2 + 4*int(be.Uint16(f.Body[countOff:]))
	default:
		return 0
	}
	return be.Uint64(f.Body[off:])
}

// withRequestID turns the SHAKE, OPEN or SEND frame at dst[start:], just
// appended, into one that carries request id id (nothing for id 0).
func withRequestID(dst []byte, start int, id uint64) []byte {
	if id == 0 {
		return dst
	}
	dst = be.AppendUint64(dst, id)
	be.PutUint16(dst[start:], uint16(len(dst)-start))
	dst[start+3] |= FlagRequestID
	return dst
}

// AppendShakeID appends a SHAKE frame carrying request id id (0: none).
func AppendShakeID(dst []byte, stamp, id uint64) []byte {
	return withRequestID(AppendShake(dst, stamp), len(dst), id)
}

// AppendOpenID appends an OPEN frame carrying request id id (0: none).
func AppendOpenID(dst []byte, stamp, env, id uint64) []byte {
	return withRequestID(AppendOpen(dst, stamp, env), len(dst), id)
}

// AppendSendID appends a SEND frame carrying request id id (0: none). It
// panics as AppendSend does.
func AppendSendID(dst []byte, stamp uint64, total uint32, recipients []uint32, id uint64) []byte {
	return withRequestID(AppendSend(dst, stamp, total, recipients), len(dst), id)
}
