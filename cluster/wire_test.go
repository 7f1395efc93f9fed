package cluster

import (
	"bytes"
	"testing"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// sample returns events of every kind that crosses, with every field set.
func sample() []event.Event {
	evs := []event.Event{
		{Kind: event.KOpen, User: 7, Env: 1<<51 | 99, Stamp: 1234, RecvNs: -5},
		{Kind: event.KChat, User: 7, Peer: 8, Stamp: 55, RecvNs: 1 << 62},
		{Kind: event.KAnswer, User: 7, Stamp: 1234, RecvNs: 42},
		{Kind: event.KPush, User: 9, Env: 77, N: 3, Status: 1},
		{Kind: event.KRepush, User: 9, Env: 77, Amount: 321, Total: 0xFFFFFFFF},
		{Kind: event.KRepush, User: 9, Env: 77},
	}
	evs[1].Buf = bytebufferpool.Get()
	evs[1].Buf.B = proto.AppendChatDeliver(evs[1].Buf.B, 55, 7, []byte("hello"))
	evs[2].SetFrame(proto.AppendOpenResult(evs[2].Out[:0], 1234, proto.OpenOK, 1<<51|99, 17))
	evs[3].SetFrame(proto.AppendEnvelope(evs[3].Out[:0], 1, 77, 5, 100, 3))
	return evs
}

// TestWireRoundTrip: a batch decodes to the events and crossings encoded,
// field for field, frames and buffers included.
func TestWireRoundTrip(t *testing.T) {
	evs := sample()
	b := appendHeader(nil, 3)
	for i := range evs {
		b = appendEvent(b, &evs[i], uint32(i+1)<<20)
	}
	setCount(b, len(evs))
	from, count, rest, err := decodeHeader(b)
	if err != nil || from != 3 || count != len(evs) {
		t.Fatalf("header: from %d count %d err %v; want 3, %d", from, count, err, len(evs))
	}
	for i := range evs {
		var got event.Event
		xid, r, err := decodeEvent(rest, &got)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		rest = r
		want := evs[i]
		if xid != uint32(i+1)<<20 {
			t.Errorf("event %d: xid %d; want %d", i, xid, uint32(i+1)<<20)
		}
		if (got.Buf == nil) != (want.Buf == nil) || got.Buf != nil && !bytes.Equal(got.Buf.B, want.Buf.B) {
			t.Errorf("event %d: buf %v; want %v", i, got.Buf, want.Buf)
		}
		got.Buf, want.Buf = nil, nil
		if got != want {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if len(rest) != 0 {
		t.Errorf("%d bytes left over", len(rest))
	}
}

// TestWireAllocs: encoding a batch into a buffer with room allocates nothing.
func TestWireAllocs(t *testing.T) {
	evs := sample()
	b := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		b = appendHeader(b[:0], 1)
		for i := range evs {
			b = appendEvent(b, &evs[i], 9)
		}
		setCount(b, len(evs))
	}); n != 0 {
		t.Errorf("encoding a batch: %v allocations; want 0", n)
	}
}

// FuzzDecode: no input makes the decoder panic or return an event whose
// frame exceeds Out; what decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	evs := sample()
	b := appendHeader(nil, 1)
	for i := range evs {
		b = appendEvent(b, &evs[i], 5)
	}
	setCount(b, len(evs))
	f.Add(b)
	f.Add(b[:len(b)-1])
	f.Add([]byte{wireVersion, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, count, rest, err := decodeHeader(data)
		if err != nil {
			return
		}
		for range count {
			var ev event.Event
			start := rest
			xid, r, err := decodeEvent(rest, &ev)
			if err != nil {
				return
			}
			if int(ev.OutLen) > event.OutCap {
				t.Fatalf("frame of %d bytes", ev.OutLen)
			}
			again := appendEvent(nil, &ev, xid)
			if !bytes.Equal(again, start[:len(start)-len(r)]) {
				t.Fatalf("re-encoded %x; decoded from %x", again, start[:len(start)-len(r)])
			}
			release(&ev)
			rest = r
		}
	})
}

// TestCrossingsExpire: crossings expire at their deadline, those due at
// once (to a gateway that is down) even behind later ones, each once; an
// answered crossing does not expire.
func TestCrossingsExpire(t *testing.T) {
	x := newCrossings()
	ev := &event.Event{Kind: event.KOpen, User: 1, Env: 5, Stamp: 3}
	late := x.add(ev, 1, 1000)
	now := x.add(ev, 1, 10) // behind a later deadline
	answered := x.add(ev, 1, 1000)
	if _, why := x.takeAnswer(answered, 1, openAnswer(ev)); why != "" {
		t.Fatalf("the answer to a crossing in flight was refused: %s", why)
	}
	got := x.expire(20, nil)
	if len(got) != 1 || got[0].xid != now {
		t.Fatalf("at 20: expired %v; want only crossing %d", got, now)
	}
	got = x.expire(1000, nil)
	if len(got) != 1 || got[0].xid != late {
		t.Fatalf("at 1000: expired %v; want only crossing %d", got, late)
	}
	if got = x.expire(5000, nil); len(got) != 0 || x.waiting() != 0 {
		t.Fatalf("at 5000: expired %v, %d waiting; want none", got, x.waiting())
	}
	if _, why := x.takeAnswer(late, 1, openAnswer(ev)); why != notWaiting {
		t.Fatalf("an expired crossing was answered (%q)", why)
	}
}
