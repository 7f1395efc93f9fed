package ingress_test

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// TestChatRateRefusals: CHATs past a connection's -chat-burst are answered
// CHAT_ACK 3 by the ingress, in the user's own SET, and never reach the
// recipient's; the rate refills the bucket; a reconnect starts full.
func TestChatRateRefusals(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		clock := &fakeClock{}
		clock.ns.Store(time.Now().UnixNano())
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, Now: clock.now, ChatRate: 1, ChatBurst: 3})
		const user, to = 7, 8 // SET 1 → SET 0
		c, _ := login(t, ing, recs[1], user, 100)

		chat := func(first, n uint64) {
			var b []byte
			for s := first; s < first+n; s++ {
				b = proto.AppendChat(b, s, to, []byte("hi"))
			}
			c.send(b)
		}
		// limitedStamps returns the stamps of the CHAT_ACK 3 the ingress
		// handed to the user's SET, checking each.
		limitedStamps := func() []uint64 {
			var got []uint64
			for _, x := range recs[1].events() {
				if x.ev.Kind != event.KAnswer || x.buf == nil {
					continue
				}
				for b := x.buf; len(b) > 0; {
					f, n, err := proto.NextResponse(b)
					if err != nil || n == 0 {
						t.Fatalf("refusals %x: %v", x.buf, err)
					}
					if st, peer := f.ChatAck(); f.Type != proto.ChatAck || st != proto.ChatLimited || peer != to {
						t.Fatalf("a refusal %x; want CHAT_ACK 3 to %d", b[:n], to)
					}
					got, b = append(got, f.Stamp), b[n:]
				}
			}
			return got
		}

		chat(1, 10) // one instant: the burst goes on, the rest is refused
		waitFor(t, "the chats routed and refused", func() bool { return recs[0].count(event.KChat) == 3 && len(limitedStamps()) == 7 })
		if got := limitedStamps(); got[0] != 4 || got[6] != 10 {
			t.Errorf("CHAT_ACK 3 for stamps %v; want 4..10", got)
		}
		clock.ns.Add(int64(time.Second)) // one token
		chat(11, 2)
		waitFor(t, "a second later", func() bool { return recs[0].count(event.KChat) == 4 && len(limitedStamps()) == 8 })
		st := waitStats(t, ing, "the counts", func(s ingress.Stats) bool { return s.ChatLimited == 8 })
		if st.Overload.Chat != 0 || st.Frames.Chat != 12 {
			t.Errorf("Stats: %d CHATs, %d overloaded; want 12 and 0 (CHAT_ACK 3 is not overload)", st.Frames.Chat, st.Overload.Chat)
		}
		for _, x := range recs[0].events() {
			if x.ev.Kind == event.KChat && (x.ev.Stamp > 3 && x.ev.Stamp != 11) {
				t.Errorf("CHAT stamp %d reached the recipient's SET; want 1, 2, 3 and 11 only", x.ev.Stamp)
			}
		}

		// Another connection of the same user starts with a full bucket.
		c2, _ := login(t, ing, recs[1], user, 200)
		var b []byte
		for s := uint64(201); s <= 205; s++ {
			b = proto.AppendChat(b, s, to, []byte("again"))
		}
		c2.send(b)
		waitFor(t, "the new connection's burst", func() bool { return recs[0].count(event.KChat) == 7 && len(limitedStamps()) == 10 })
	})
}
