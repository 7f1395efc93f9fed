package egress_test

import (
	"testing"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/egress"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// chats hands egress one batch of n CHATs from user 2 to s.c, as the
// session leaves them: counted in ChatQueued, the CHAT_DELIVER in Buf.
func (s *setup) chats(n int, text []byte) {
	i := 0
	s.batch(func(ev *event.Event) bool {
		ev.Kind, ev.User, ev.Peer, ev.Conn2 = event.KChat, 2, s.c.User, conn.HandleOf(s.c)
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = proto.AppendChatDeliver(ev.Buf.B[:0], uint64(i), 2, text)
		s.c.ChatQueued += uint32(len(ev.Buf.B))
		i++
		return i < n
	})
}

// unwritten is s.c's output not yet written (the test runs the egress, so
// it may read the egress's fields between batches).
func (s *setup) unwritten() int {
	if s.c.Out == nil {
		return 0
	}
	return len(s.c.Out.B) - s.c.Sent
}

// TestChatBacklog: after each batch, the backlog the session judges chats
// by (conn.Conn.ChatBacklog) is the connection's unwritten output, chats and
// other answers alike; chats the session routed and the egress has not
// appended yet count on top.
func TestChatBacklog(t *testing.T) {
	for _, mode := range []egress.Mode{egress.Batch, egress.EachFrame} {
		s := newSetup(t, mode, 256<<10, 4096)
		text := make([]byte, proto.MaxChatText)
		check := func(when string) {
			t.Helper()
			if got, want := s.c.ChatBacklog(), s.unwritten(); int(got) != want {
				t.Errorf("mode %d, %s: ChatBacklog %d; want the %d bytes unwritten", mode, when, got, want)
			}
		}
		check("at the start")
		s.chats(3, text)
		check("after 3 chats, written")
		s.chats(40, text) // past what the socket takes
		check("after 40 more")
		if s.unwritten() == 0 {
			t.Fatalf("mode %d: nothing left unwritten after 43 KiB to a socket of 4 KiB", mode)
		}
		s.pongs(1, 10)
		check("after PONGs")
		before, one := s.c.ChatBacklog(), uint32(proto.ChatLen(len(text)))
		s.c.ChatQueued += one // routed, not yet appended
		if got := s.c.ChatBacklog(); got != before+one {
			t.Errorf("mode %d: a chat routed and not appended: ChatBacklog %d; want %d", mode, got, before+one)
		}
		s.c.ChatQueued -= one
		// The peer reads it all; each KWritable writes more, until none is left.
		b := make([]byte, 64<<10)
		for i := 0; s.unwritten() > 0; i++ {
			if i == 1000 {
				t.Fatalf("mode %d: %d bytes still unwritten", mode, s.unwritten())
			}
			unix.Read(s.peer, b)
			s.batch(func(ev *event.Event) bool {
				ev.Kind, ev.Conn = event.KWritable, conn.HandleOf(s.c)
				return false
			})
		}
		check("once all is written")
		if s.c.ChatBacklog() != 0 || s.l.Egress.CutOff.Load() != 0 {
			t.Errorf("mode %d: ChatBacklog %d, %d cut off; want 0, 0", mode, s.c.ChatBacklog(), s.l.Egress.CutOff.Load())
		}
	}
}
