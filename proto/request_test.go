package proto_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/proto"
)

// TestRequestID: a SHAKE, OPEN or SEND carries its request id after its
// fields and round-trips through the decoder, with bytes after the id
// ignored; a frame without the flag has none; a flag with no room for the
// id is malformed; other types ignore the flag.
func TestRequestID(t *testing.T) {
	const id = 0x6789abcd_00000007
	frames := map[proto.Type][]byte{
		proto.Shake: proto.AppendShakeID(nil, 3, id),
		proto.Open:  proto.AppendOpenID(nil, 3, 1<<40|5, id),
		proto.Send:  proto.AppendSendID(nil, 3, 100, []uint32{7, 8, 9}, id),
	}
	for typ, b := range frames {
		long := append(withLen(b, len(b)+2), 0xee, 0xee, 0xaa) // two bytes past the id, then the next frame
		f, n, err := proto.NextRequest(long)
		if err != nil || n != len(b)+2 || f.Type != typ || f.Flags != proto.FlagRequestID {
			t.Fatalf("%v: n=%d err=%v flags=%#x; want the whole frame, flagged", typ, n, err, f.Flags)
		}
		if got := f.RequestID(); got != id {
			t.Errorf("%v: request id %#x; want %#x", typ, got, id)
		}
		switch typ {
		case proto.Open:
			if env := f.Open(); env != 1<<40|5 {
				t.Errorf("OPEN: envelope %#x", env)
			}
		case proto.Send:
			if total, k := f.Send(); total != 100 || k != 3 || f.SendRecipient(2) != 9 {
				t.Errorf("SEND: total %d, %d recipients", total, k)
			}
		}
		plain := append([]byte(nil), b...)
		plain[3] = 0
		if f, _, _ := proto.NextRequest(plain); f.RequestID() != 0 {
			t.Errorf("%v without the flag: request id %#x; want none", typ, f.RequestID())
		}
		short := withLen(b, len(b)-1)[:len(b)-1]
		if _, n, err := proto.NextRequest(short); n != 0 || err == nil || err.(*proto.Violation).Code != proto.ErrCodeMalformed {
			t.Errorf("%v flagged with no room for its id: n=%d err=%v; want malformed", typ, n, err)
		}
		if _, n, err := proto.NextRequest(b[:3]); n != 0 || err != nil {
			t.Errorf("%v: 3 bytes: n=%d err=%v; want a wait for the flags", typ, n, err)
		}
	}
	if got := proto.AppendShakeID(nil, 3, 0); len(got) != proto.ShakeLen || got[3] != 0 {
		t.Errorf("id 0 encoded as %x; want a plain SHAKE", got)
	}
	ping := proto.AppendPing(nil, 3)
	ping[3] = proto.FlagRequestID
	if f, n, err := proto.NextRequest(ping); n != proto.PingLen || err != nil || f.RequestID() != 0 {
		t.Errorf("a flagged PING: n=%d err=%v id=%#x; want the flag ignored", n, err, f.RequestID())
	}
	if sec := proto.RequestIDTime(proto.NewRequestID(1_800_000_000, 9)); sec != 1_800_000_000 {
		t.Errorf("RequestIDTime: %d", sec)
	}
}
