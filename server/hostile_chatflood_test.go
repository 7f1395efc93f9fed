package server_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// TestHostileChatFlood: one user pipelines 1 KiB CHATs, 128 times
// -max-pending of them, at a logged-in user that never reads. The recipient
// is not cut off: past the sender's -chat-rate its CHATs are answered
// CHAT_ACK 3 at once, and once the recipient's unwritten output is at half of
// -max-pending CHAT_ACK 2 (dropped). What the sender is told adds up with
// what the server counts, and the recipient, reading at last, gets exactly
// the chats handed to it on a connection that still answers.
func TestHostileChatFlood(t *testing.T) {
	t.Run("at the default -chat-rate", func(t *testing.T) { chatFlood(t, 0, 0) })
	// The backlog alone stops it: the rate would refuse nearly every chat.
	// (The chats of one read share its clock, so the burst bounds them too.)
	t.Run("with no -chat-rate to speak of", func(t *testing.T) { chatFlood(t, 1e9, 1<<20) })
}

// chatFlood floods with -chat-rate rate and -chat-burst burst (0: the
// defaults).
func chatFlood(t *testing.T, rate float64, burst int) {
	const maxPending = 32 << 10
	ts := startServer(t, func(o *server.Options) { o.MaxPending, o.ChatRate, o.ChatBurst = maxPending, rate, burst })
	victim := slowReader(t, ts, 1, nil)
	attacker := login(t, ts, 2)
	text := chatText(proto.MaxChatText)
	const chats, batch = 128 * maxPending / proto.MaxChatText, 128

	start := time.Now()
	var acks [proto.ChatLimited + 1]int
	for sent := 0; sent < chats; sent += batch {
		var b []byte
		first := attacker.stamp + 1
		for range batch {
			b = proto.AppendChat(b, attacker.nextStamp(), victim.user, text)
		}
		attacker.send(b)
		for s := first; s <= attacker.stamp; s++ {
			st, to := attacker.answer(s).ChatAck()
			if to != victim.user || int(st) >= len(acks) {
				t.Fatalf("CHAT_ACK status %d to %d; want 0, 2 or 3 to %d", st, to, victim.user)
			}
			acks[st]++
		}
		if acks[proto.ChatOffline] > 0 {
			t.Fatalf("after %d chats (%v by status), the recipient is offline: cut off by chats it never asked for", sent+batch, acks)
		}
	}
	took := time.Since(start)
	handed, refused, limited := acks[proto.ChatHanded], acks[proto.ChatOverloaded], acks[proto.ChatLimited]
	t.Logf("%d chats in %v: %d handed, %d not delivered (CHAT_ACK 2), %d over the rate (CHAT_ACK 3)", chats, took, handed, refused, limited)
	if handed+refused+limited != chats {
		t.Fatalf("CHAT_ACKs by status %v; want %d in all", acks, chats)
	}
	if rate == 0 {
		// At most the burst and what the rate refilled while the flood lasted.
		if most := server.DefaultChatBurst + int(server.DefaultChatRate*took.Seconds()) + 1; handed+refused > most {
			t.Errorf("%d chats went on to the recipient's SET in %v; want at most %d (-chat-burst %d, -chat-rate %d)",
				handed+refused, took, most, server.DefaultChatBurst, server.DefaultChatRate)
		}
	} else if limited != 0 || refused == 0 {
		t.Errorf("%d chats limited, %d not delivered; want none limited, and the recipient's full backlog to refuse some", limited, refused)
	}

	// The server's counts, once its loops have published theirs: every chat
	// is one of these.
	waitFor(t, "/stats to count every chat", func() bool {
		st := ts.stats().Chat
		return st.Delivered+st.Offline+st.Dropped == st.Received && st.Received+st.Overload+st.Limited == chats
	})
	st := ts.stats().Chat
	if st.Delivered != uint64(handed) || st.Dropped+st.Overload != uint64(refused) || st.Limited != uint64(limited) || st.Offline != 0 {
		t.Errorf("/stats chat %+v; want delivered %d, dropped + overload %d, limited %d, offline 0", st, handed, refused, limited)
	}
	for name, want := range map[string]uint64{
		"hongbao_cut_off_total": 0, "hongbao_chat_limited_total": st.Limited, "hongbao_chat_dropped_total": st.Dropped,
	} {
		if got := metric(t, ts, name); got != want {
			t.Errorf("%s %d; want %d", name, got, want)
		}
	}

	// The recipient reads at last: every chat handed to it, whole, and its
	// connection still answers.
	for i := range handed {
		f := victim.next()
		if from, txt := f.ChatDeliver(); f.Type != proto.ChatDeliver || from != attacker.user || !bytes.Equal(txt, text) {
			t.Fatalf("recipient's frame %d: %s; want the %d chats handed to it", i+1, describe(f), handed)
		}
	}
	victim.ping()
	attacker.ping()
}

// TestLoadClientCountsChatLimited: the load client counts CHAT_ACK 3 with
// the other CHAT answers and shows it in its summary, and it is no error.
func TestLoadClientCountsChatLimited(t *testing.T) {
	t.Parallel() // its load is paced by the clock, well under what the server serves
	ts := startServer(t, func(o *server.Options) { o.ChatRate, o.ChatBurst = 1, 1 })
	r, err, took, out := runLoad(t, 30*time.Second, "-server", ts.addr, "-users", "1-2", "-qps", "10",
		"-duration", "2s", "-loops", "1", "-chat-rate", "100", "-grace", "2s", "-quiet")
	t.Logf("run took %v:\n%s", took, out)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	c := r.Requests["CHAT"]
	if c == nil || c.Status["3"] == 0 || c.Status["3"] > c.Answered {
		t.Fatalf("CHAT report %+v; want CHAT_ACK 3 counted among its answers", c)
	}
	shown := false
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "CHAT" {
			shown = strings.Contains(line, " 3:")
		}
	}
	if !shown {
		t.Errorf("the summary's CHAT row shows no status 3")
	}
	if limited := ts.stats().Chat.Limited; limited < c.Status["3"] {
		t.Errorf("/stats chat.limited %d; want at least the %d CHAT_ACK 3 the client counted", limited, c.Status["3"])
	}
}
