package journal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// A record on disk:
//
//	len   u32 BE  bytes of body
//	crc   u32 BE  CRC-32C of len (its 4 bytes) and body
//	body:
//	  type u8     what changed (the Rec… constants; the journal gives them no meaning)
//	  pid  u16 BE the producer that appended it: its records replay in the order appended
//	  payload     len-3 bytes
//
// The length is covered by the checksum, so that a flipped length bit is
// caught as corruption rather than read as a record of another size.
const (
	HeaderLen = 8
	bodyMin   = 3
	// MaxPayload bounds one record: a group envelope with its recipients is
	// the largest the server writes (~420 bytes); the bound keeps a corrupt
	// length from making the reader allocate or skip megabytes.
	MaxPayload = 1<<16 - bodyMin
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of b, the checksum of records and segment headers,
// for other files of the data directory (snapshots) to use the same.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Record is one decoded record. Payload aliases the buffer it was decoded
// from.
type Record struct {
	Type    uint8
	PID     uint16
	Payload []byte
}

// Errors of Decode. ErrShort means the buffer ends inside the record: at the
// end of the last segment, a torn tail.
var (
	ErrShort   = errors.New("journal: record cut short")
	ErrCRC     = errors.New("journal: record checksum mismatch")
	ErrBadSize = errors.New("journal: record length out of range")
)

// Size is the bytes a record with a payload of n bytes takes on disk.
func Size(n int) int { return HeaderLen + bodyMin + n }

// AppendRecord appends the encoded record to dst.
func AppendRecord(dst []byte, typ uint8, pid uint16, payload []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(bodyMin+len(payload)))
	dst = append(dst, 0, 0, 0, 0, typ, byte(pid>>8), byte(pid))
	dst = append(dst, payload...)
	crc := crc32.Update(0, castagnoli, dst[start:start+4])
	crc = crc32.Update(crc, castagnoli, dst[start+HeaderLen:])
	binary.BigEndian.PutUint32(dst[start+4:], crc)
	return dst
}

// Decode reads the record at the start of b and returns it with the bytes it
// took.
func Decode(b []byte) (Record, int, error) {
	if len(b) < HeaderLen {
		return Record{}, 0, ErrShort
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < bodyMin || n > bodyMin+MaxPayload {
		return Record{}, 0, ErrBadSize
	}
	if len(b) < HeaderLen+n {
		return Record{}, 0, ErrShort
	}
	body := b[HeaderLen : HeaderLen+n]
	crc := crc32.Update(0, castagnoli, b[:4])
	if crc32.Update(crc, castagnoli, body) != binary.BigEndian.Uint32(b[4:]) {
		return Record{}, 0, ErrCRC
	}
	return Record{Type: body[0], PID: binary.BigEndian.Uint16(body[1:]), Payload: body[bodyMin:]}, HeaderLen + n, nil
}

// walk decodes the records of b from off, handing each to fn (if not nil),
// and returns the offset where it stopped with the reason.
func walk(b []byte, off int, fn func(Record) error) (int, error) {
	for off < len(b) {
		r, n, err := Decode(b[off:])
		if err != nil {
			return off, err
		}
		if fn != nil {
			if err := fn(r); err != nil {
				return off, err
			}
		}
		off += n
	}
	return off, nil
}
