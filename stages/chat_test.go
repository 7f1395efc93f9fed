package stages_test

import (
	"runtime"
	"testing"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// chatBytes publishes a CHAT of text from cl to user to, as the ingress
// would, allocating nothing but what the pool gives.
func (cl *client) chatBytes(to uint32, text []byte, stamp uint64) {
	cl.request(event.KChat, cl.p.bus.SETOf(to), stamp, func(ev *event.Event) {
		ev.Peer = to
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = proto.AppendChatDeliver(ev.Buf.B[:0], stamp, cl.user, text)
	})
}

// stall makes cl's connection hold little in the kernel (the least send
// buffer on the server's side), and cl reads nothing: what the egress writes
// to it soon stays in its backlog.
func (cl *client) stall() {
	cl.p.t.Helper()
	if err := unix.SetsockoptInt(cl.c.FD, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		cl.p.t.Fatal(err)
	}
}

// TestChatToFullBacklog: one user pipelines 1 KiB chats, far more than
// -max-pending (64 KiB here) of them, at a user who reads nothing. The
// session hands it chats until its backlog would pass half of -max-pending
// and answers the rest CHAT_ACK 2; the recipient is never cut off, and once
// it reads it gets exactly the chats handed to it and the answer to its own
// PING after them.
func TestChatToFullBacklog(t *testing.T) {
	p := newPipeline(t, 2, 256, defaultLimits, nil)
	r, a := p.login(2), p.login(1) // SET 0 and SET 1: the acks cross back
	r.stall()
	text := make([]byte, proto.MaxChatText)
	const chats = 2000 // ~2 MiB: 32 × -max-pending
	for i := range chats {
		a.chatBytes(r.user, text, uint64(1000+i))
	}
	var acks [proto.ChatLimited + 1]int
	for range chats {
		f := a.expect(proto.ChatAck)
		st, to := f.ChatAck()
		if to != r.user || st >= proto.ChatLimited || st == proto.ChatOffline {
			t.Fatalf("after %v: CHAT_ACK status %d to %d; want 0 or 2 to %d", acks, st, to, r.user)
		}
		acks[st]++
	}
	handed, dropped := acks[proto.ChatHanded], acks[proto.ChatOverloaded]
	t.Logf("%d chats: %d handed, %d dropped", chats, handed, dropped)
	s := &p.ledgers[0].Session
	if dropped == 0 || s.ChatDropped.Load() != uint64(dropped) || s.ChatDelivered.Load() != uint64(handed) || s.ChatReceived.Load() != chats {
		t.Errorf("session counters: received %d, delivered %d, dropped %d; want %d, %d, %d (and some dropped)",
			s.ChatReceived.Load(), s.ChatDelivered.Load(), s.ChatDropped.Load(), chats, handed, dropped)
	}
	if cut := p.ledgers[0].Egress.CutOff.Load(); cut != 0 {
		t.Fatalf("the recipient was cut off (%d): chats alone must never do it", cut)
	}

	r.request(event.KPing, -1, 7, func(ev *event.Event) { ev.SetFrame(proto.AppendPong(ev.Out[:0], 7)) })
	for i := range handed {
		if f := r.next(); f.Type != proto.ChatDeliver {
			t.Fatalf("recipient's frame %d: %v; want the %d chats handed to it, then PONG", i+1, f.Type, handed)
		}
	}
	if f := r.next(); f.Type != proto.Pong || f.Stamp != 7 {
		t.Fatalf("after the chats: %v stamp %d; want PONG 7", f.Type, f.Stamp)
	}
	if cut := p.ledgers[0].Egress.CutOff.Load(); cut != 0 {
		t.Errorf("the recipient was cut off (%d)", cut)
	}
}

// TestAllocsPerChat: a CHAT handed to its recipient and one dropped for the
// recipient's full backlog allocate nothing, their CHAT_ACK crossing back
// to the sender's SET included.
func TestAllocsPerChat(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := newPipeline(t, 2, 256, defaultLimits, nil)
	a, b, full := p.login(1), p.login(2), p.login(4) // SET 1; SET 0, SET 0
	sink(a)
	sink(b)
	full.stall()
	text := make([]byte, proto.MaxChatText)
	for i := 0; p.ledgers[0].Session.ChatDropped.Load() == 0; i++ { // fill full's backlog
		if i == 1000 {
			t.Fatal("no chat dropped after 1,000 to a user who reads nothing")
		}
		a.chatBytes(full.user, text, 1)
		for p.ledgers[0].Session.ChatReceived.Load() != uint64(i+1) {
			runtime.Gosched()
		}
	}
	acks := &p.ledgers[1].Egress.Frames[ledger.FrameIndex(byte(proto.ChatAck))]
	for _, tc := range []struct {
		name string
		to   uint32
	}{
		{"CHAT handed across SETs", b.user},
		{"CHAT dropped: the recipient's backlog is full", full.user},
	} {
		req := func() {
			before := acks.Load()
			a.chatBytes(tc.to, text, 2)
			for acks.Load() == before { // the CHAT_ACK written to the sender
				runtime.Gosched()
			}
		}
		dropped := p.ledgers[0].Session.ChatDropped.Load()
		req() // warm up
		if allocs := testing.AllocsPerRun(2000, req); allocs != 0 {
			t.Errorf("%s: %v allocations per CHAT; want 0", tc.name, allocs)
		}
		// The kernel compacts the stalled receive queue now and then and
		// takes a few more bytes, so a handful of chats to it may still be
		// handed. (Either way allocates nothing, so a busy sink that drops
		// some of its own spoils nothing.)
		if dropped = p.ledgers[0].Session.ChatDropped.Load() - dropped; tc.to == full.user && dropped < 1900 {
			t.Errorf("%s: %d of 2,002 chats dropped", tc.name, dropped)
		}
	}
	if cut := p.ledgers[0].Egress.CutOff.Load(); cut != 0 {
		t.Errorf("%d connections cut off; want none", cut)
	}
}
