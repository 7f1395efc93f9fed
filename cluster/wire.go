package cluster

import (
	"encoding/binary"
	"errors"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
)

// The wire form of a batch of events, one NATS message per round of a link:
//
//	header:  version u8 · from u16 · count u16
//	event:   kind u8 · status u8 · out_len u8 · n u16 · user u32 · peer u32 ·
//	         amount u32 · total u32 · xid u32 · stamp u64 · env u64 · recv_ns i64 ·
//	         out[out_len] · buf_len u16 · buf[buf_len]
//
// All integers big-endian. xid names the crossing a request or its answer
// belongs to (0: none). Connections never cross: a request's connection
// stays in the crossing table of the gateway it came from, and the answer
// finds it there by xid. Journal positions never cross either: a link sends
// a money answer only once it is durable where it was made.
const (
	wireVersion = 1
	headerLen   = 1 + 2 + 2
	eventLen    = 1 + 1 + 1 + 2 + 4*5 + 8*3 + 2 // without out and buf
	// maxMessage keeps a message well under NATS's default max_payload (1 MiB).
	maxMessage = 512 << 10
)

var errWire = errors.New("cluster: malformed batch")

func appendHeader(b []byte, from int) []byte {
	b = append(b, wireVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(from))
	return binary.BigEndian.AppendUint16(b, 0) // count, set by setCount
}

func setCount(b []byte, n int) { binary.BigEndian.PutUint16(b[3:], uint16(n)) }

// appendEvent appends ev as sent to another gateway, with crossing xid.
func appendEvent(b []byte, ev *event.Event, xid uint32) []byte {
	b = append(b, byte(ev.Kind), ev.Status, ev.OutLen)
	b = binary.BigEndian.AppendUint16(b, ev.N)
	b = binary.BigEndian.AppendUint32(b, ev.User)
	b = binary.BigEndian.AppendUint32(b, ev.Peer)
	b = binary.BigEndian.AppendUint32(b, ev.Amount)
	b = binary.BigEndian.AppendUint32(b, ev.Total)
	b = binary.BigEndian.AppendUint32(b, xid)
	b = binary.BigEndian.AppendUint64(b, ev.Stamp)
	b = binary.BigEndian.AppendUint64(b, ev.Env)
	b = binary.BigEndian.AppendUint64(b, uint64(ev.RecvNs))
	b = append(b, ev.Frame()...)
	var buf []byte
	if ev.Buf != nil {
		buf = ev.Buf.B
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(buf)))
	return append(b, buf...)
}

// decodeHeader returns the sender and the event count of message b, and the
// events' bytes.
func decodeHeader(b []byte) (from, count int, rest []byte, err error) {
	if len(b) < headerLen || b[0] != wireVersion {
		return 0, 0, nil, errWire
	}
	return int(binary.BigEndian.Uint16(b[1:])), int(binary.BigEndian.Uint16(b[3:])), b[headerLen:], nil
}

// decodeEvent fills ev (zeroed first) from the next event of b and returns
// its crossing and the bytes after it. A buf travels in a pooled buffer that
// ev then owns.
func decodeEvent(b []byte, ev *event.Event) (xid uint32, rest []byte, err error) {
	if len(b) < eventLen {
		return 0, nil, errWire
	}
	*ev = event.Event{Kind: event.Kind(b[0]), Status: b[1]}
	outLen := int(b[2])
	if outLen > event.OutCap || len(b) < eventLen+outLen {
		return 0, nil, errWire
	}
	ev.N = binary.BigEndian.Uint16(b[3:])
	ev.User = binary.BigEndian.Uint32(b[5:])
	ev.Peer = binary.BigEndian.Uint32(b[9:])
	ev.Amount = binary.BigEndian.Uint32(b[13:])
	ev.Total = binary.BigEndian.Uint32(b[17:])
	xid = binary.BigEndian.Uint32(b[21:])
	ev.Stamp = binary.BigEndian.Uint64(b[25:])
	ev.Env = binary.BigEndian.Uint64(b[33:])
	ev.RecvNs = int64(binary.BigEndian.Uint64(b[41:]))
	b = b[49:]
	ev.SetFrame(append(ev.Out[:0], b[:outLen]...))
	b = b[outLen:]
	bufLen := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) < bufLen {
		return 0, nil, errWire
	}
	if bufLen > 0 {
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = append(ev.Buf.B[:0], b[:bufLen]...)
	}
	return xid, b[bufLen:], nil
}
