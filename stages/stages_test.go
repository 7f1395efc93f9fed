package stages_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/stages"
)

var defaultLimits = stages.Limits{MaxShares: 100, MaxTotal: 20000, TTL: time.Hour}

// deal puts envelopes ids first.. with amounts into set's pool, as a shake
// campaign does.
func (p *pipeline) deal(set int, first uint64, amounts []uint32) {
	p.publish(set, func(ev *event.Event) {
		ev.Kind, ev.Env, ev.N = event.KDeal, first, uint16(len(amounts))
		ev.Buf = bytebufferpool.Get()
		for _, a := range amounts {
			ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, a)
		}
	})
}

func TestShakeDrainsPoolExactly(t *testing.T) {
	const sets, users, perSet = 3, 30, 200
	p := newPipeline(t, sets, 256, defaultLimits, nil)
	clients := make([]*client, users)
	for i := range clients {
		clients[i] = p.login(uint32(i + 1))
	}
	var want uint64
	for s := 0; s < sets; s++ {
		amounts := make([]uint32, perSet)
		for i := range amounts {
			amounts[i] = uint32(1 + (s*perSet+i)%97)
			want += uint64(amounts[i])
		}
		for i := 0; i < perSet; i += 50 {
			p.deal(s, uint64(1_000_000*(s+1)+i), amounts[i:i+50])
		}
	}
	var (
		mu   sync.Mutex
		seen = map[uint64]bool{}
		sum  atomic.Uint64
		wg   sync.WaitGroup
	)
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for stamp := uint64(1); ; stamp++ {
				cl.shake(stamp)
				f := cl.expect(proto.ShakeResult)
				st, env, amt := f.ShakeResult()
				if f.Stamp != stamp {
					t.Errorf("stamp %d; want %d", f.Stamp, stamp)
				}
				if st == proto.ShakeNothing {
					return // this user's SET pool is empty
				}
				mu.Lock()
				if seen[env] {
					t.Errorf("envelope %d handed out twice", env)
				}
				seen[env] = true
				mu.Unlock()
				sum.Add(uint64(amt))
			}
		}()
	}
	wg.Wait()
	if len(seen) != sets*perSet || sum.Load() != want {
		t.Errorf("clients got %d envelopes worth %d; want %d worth %d", len(seen), sum.Load(), sets*perSet, want)
	}
	p.checkInvariants()
	if st := p.stats().Shake; st.GotAmount != want || st.PoolAmount != 0 {
		t.Errorf("ledger got_amount %d pool_amount %d; want %d and 0", st.GotAmount, st.PoolAmount, want)
	}
}

func TestShakeForGoneConnectionReturnsToPool(t *testing.T) {
	p := newPipeline(t, 1, 64, defaultLimits, nil)
	cl := p.login(1)
	p.deal(0, 42, []uint32{500})
	h := cl.c
	cl.request(event.KDisconnect, -1, 0, nil) // egress releases the conn: its generation moves on
	deadline := time.Now().Add(5 * time.Second)
	for p.owner.released.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	// A SHAKE that was decoded before the disconnect: its handle is now stale.
	stale := cl.c.Gen() - 1
	p.publish(0, func(ev *event.Event) {
		ev.Kind, ev.User, ev.Stamp = event.KShake, 1, 9
		ev.Conn.C, ev.Conn.Gen = h, stale
	})
	waitFor(t, "the envelope to come back", func() bool { return p.ledgers[0].Shake.Returned.Load() == 1 })
	p.checkInvariants()
	l := p.ledgers[0]
	if got, pool, ret := l.Egress.Got.Load(), l.Shake.Pool.Load(), l.Shake.Returned.Load(); got != 0 || pool != 1 || ret != 1 {
		t.Errorf("got %d, pool %d, returned %d; want 0, 1, 1", got, pool, ret)
	}
}

func TestSendAndOpenAcrossSETs(t *testing.T) {
	p := newPipeline(t, 4, 128, defaultLimits, nil)
	sender := p.login(4) // SET 0
	rcpt := []*client{p.login(1), p.login(2), p.login(7)}
	outsider := p.login(5)
	sender.send(1000, []uint32{1, 2, 7}, 77)
	ack := sender.expect(proto.SendAck)
	st, env := ack.SendAck()
	if st != proto.SendOK || ack.Stamp != 77 || env == 0 {
		t.Fatalf("SEND_ACK status %d env %d stamp %d; want 0, an id, 77", st, env, ack.Stamp)
	}
	var sum uint32
	for i, r := range rcpt {
		f := r.expect(proto.Envelope)
		if e, from, total, shares := f.Envelope(); e != env || from != 4 || total != 1000 || shares != 3 {
			t.Fatalf("ENVELOPE %d from %d total %d shares %d", e, from, total, shares)
		}
		r.open(env, uint64(100+i))
		f = r.expect(proto.OpenResult)
		st, e, share := f.OpenResult()
		if st != proto.OpenOK || e != env || share < 1 || f.Stamp != uint64(100+i) {
			t.Fatalf("OPEN_RESULT status %d env %d share %d stamp %d", st, e, share, f.Stamp)
		}
		sum += share
		r.open(env, 200)
		if st2, _, again := r.expect(proto.OpenResult).OpenResult(); st2 != proto.OpenAlready || again != share {
			t.Errorf("second OPEN: status %d share %d; want 1 and %d", st2, again, share)
		}
	}
	if sum != 1000 {
		t.Errorf("shares sum to %d; want 1000", sum)
	}
	outsider.open(env, 1)
	if st, _, _ := outsider.expect(proto.OpenResult).OpenResult(); st != proto.OpenNotRecipient {
		t.Errorf("OPEN by a non-recipient: status %d; want 2", st)
	}
	outsider.open(env+1_000_000, 1)
	if st, _, _ := outsider.expect(proto.OpenResult).OpenResult(); st != proto.OpenNoSuch {
		t.Errorf("OPEN of an unknown envelope: status %d; want 3", st)
	}
	p.checkInvariants()
}

func TestSendInvalid(t *testing.T) {
	p := newPipeline(t, 2, 64, stages.Limits{MaxShares: 3, MaxTotal: 100, TTL: time.Hour}, nil)
	cl := p.login(1)
	f := func(total uint32, rcpt []uint32) {
		t.Helper()
		cl.send(total, rcpt, 5)
		if st, _ := cl.expect(proto.SendAck).SendAck(); st != proto.SendInvalid {
			t.Errorf("SEND total %d to %v: status %d; want 1 (invalid)", total, rcpt, st)
		}
	}
	f(10, nil)                  // no recipient
	f(10, []uint32{2, 3, 4, 5}) // over max shares
	f(2, []uint32{2, 3, 4})     // total below shares
	f(101, []uint32{2})         // over max total
	f(10, []uint32{2, 2})       // duplicate
	f(10, []uint32{1, 2})       // the sender
	f(10, []uint32{0, 2})       // the system
	p.checkInvariants()
	if n := p.ledgers[0].Split.SendInvalid.Load() + p.ledgers[1].Split.SendInvalid.Load(); n != 7 {
		t.Errorf("send_invalid %d; want 7", n)
	}
}

func TestChat(t *testing.T) {
	p := newPipeline(t, 3, 64, defaultLimits, nil)
	a, b, c := p.login(1), p.login(2), p.login(4) // SETs 1, 2, 1
	for _, tc := range []struct {
		from, to *client
	}{{a, b}, {a, c}, {b, a}} {
		text := fmt.Sprintf("你好 %d→%d", tc.from.user, tc.to.user)
		tc.from.chat(tc.to.user, text, 33)
		d := tc.to.expect(proto.ChatDeliver)
		if from, got := d.ChatDeliver(); from != tc.from.user || string(got) != text || d.Stamp != 33 {
			t.Errorf("CHAT_DELIVER from %d %q stamp %d; want %d %q 33", from, got, d.Stamp, tc.from.user, text)
		}
		if st, to := tc.from.expect(proto.ChatAck).ChatAck(); st != proto.ChatHanded || to != tc.to.user {
			t.Errorf("CHAT_ACK %d to %d; want 0 to %d", st, to, tc.to.user)
		}
	}
	a.chat(99, "anyone?", 34)
	if st, to := a.expect(proto.ChatAck).ChatAck(); st != proto.ChatOffline || to != 99 {
		t.Errorf("CHAT_ACK to an offline user: %d to %d; want 1 to 99", st, to)
	}
}

func TestSecondLoginReplacesFirst(t *testing.T) {
	p := newPipeline(t, 1, 64, defaultLimits, nil)
	first := p.login(3)
	second := p.login(3)
	if code := first.expect(proto.Error).ErrorCode(); code != proto.ErrCodeReplaced {
		t.Errorf("older connection got ERROR %d; want 5", code)
	}
	second.shake(1)
	second.expect(proto.ShakeResult)
}

func TestGroupEnvelopeExpires(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	p := newPipeline(t, 1, 64, stages.Limits{MaxShares: 10, MaxTotal: 1000, TTL: time.Minute}, now.Load)
	s, r1, r2 := p.login(1), p.login(2), p.login(3)
	s.send(500, []uint32{2, 3}, 1)
	_, env := s.expect(proto.SendAck).SendAck()
	r1.expect(proto.Envelope)
	r2.expect(proto.Envelope)
	r1.open(env, 2)
	_, _, share := r1.expect(proto.OpenResult).OpenResult()
	now.Add(int64(time.Minute)) // the envelope's TTL passes
	r2.open(env, 3)
	if st, _, _ := r2.expect(proto.OpenResult).OpenResult(); st != proto.OpenNoSuch {
		t.Errorf("OPEN after expiry: status %d; want 3", st)
	}
	p.checkInvariants()
	if ref := p.ledgers[0].Split.RefundedAmount.Load(); ref != uint64(500-share) {
		t.Errorf("refunded %d; want %d", ref, 500-share)
	}
}

func TestSystemSendPicksDistinctOnlineUsers(t *testing.T) {
	p := newPipeline(t, 2, 128, defaultLimits, nil)
	var set0 []*client
	for u := uint32(2); u <= 20; u += 2 { // users of SET 0
		set0 = append(set0, p.login(u))
	}
	for i := 0; i < 20; i++ {
		p.publish(0, func(ev *event.Event) { ev.Kind, ev.N, ev.Total = event.KSystemSend, 3, 300 })
	}
	pushes := map[uint64][]uint32{}
	deadline := time.Now().Add(5 * time.Second)
	for p.ledgers[0].Egress.Frames[ledger.FrameIndex(byte(proto.Envelope))].Load() < 60 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	total := 0
	for _, cl := range set0 {
		for _, f := range cl.drain() {
			env, sender, _, shares := f.Envelope()
			if f.Type != proto.Envelope || sender != 0 || shares != 3 {
				t.Errorf("got %v sender %d shares %d; want a system ENVELOPE of 3 shares", f.Type, sender, shares)
			}
			pushes[env] = append(pushes[env], cl.user)
			total++
		}
	}
	if len(pushes) != 20 || total != 60 {
		t.Fatalf("%d envelopes pushed %d times; want 20 pushed 60 times", len(pushes), total)
	}
	for env, users := range pushes {
		if len(users) != 3 || users[0] == users[1] || users[1] == users[2] || users[0] == users[2] {
			t.Errorf("envelope %d went to %v; want 3 distinct users", env, users)
		}
	}
	// A SET with fewer online users than shares skips the envelope.
	p.publish(1, func(ev *event.Event) { ev.Kind, ev.N, ev.Total = event.KSystemSend, 3, 300 })
	deadline = time.Now().Add(5 * time.Second)
	for p.ledgers[1].Session.SystemPicksFailed.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := p.ledgers[1].Session.SystemPicksFailed.Load(); n != 1 {
		t.Errorf("system picks failed %d; want 1", n)
	}
	p.checkInvariants()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A fully opened envelope is kept for Retain (a repeated OPEN answers
// "already" with the share), then forgotten; the expiry queue stays within
// about twice the envelopes held even when one never opened sits at its head.
func TestOpenedEnvelopeRetainedThenForgotten(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	p := newPipeline(t, 1, 64, stages.Limits{MaxShares: 10, MaxTotal: 1000, TTL: time.Hour, Retain: time.Minute}, now.Load)
	s, r1, r2 := p.login(1), p.login(2), p.login(3)
	c := &p.ledgers[0].Split
	send := func(stamp uint64) uint64 {
		t.Helper()
		s.send(100, []uint32{2, 3}, stamp)
		_, env := s.expect(proto.SendAck).SendAck()
		r1.expect(proto.Envelope)
		r2.expect(proto.Envelope)
		return env
	}
	open := func(cl *client, env uint64) (uint8, uint32) {
		t.Helper()
		cl.open(env, 9)
		st, _, share := cl.expect(proto.OpenResult).OpenResult()
		return st, share
	}
	never := send(1) // never opened: at the head of the TTL queue for the whole test
	env := send(2)
	_, share := open(r1, env)
	open(r2, env)
	if st, again := open(r1, env); st != proto.OpenAlready || again != share {
		t.Errorf("repeated OPEN within the retention: status %d share %d; want 1 (already) and %d", st, again, share)
	}
	now.Add(int64(time.Minute))
	if st, _ := open(r1, env); st != proto.OpenNoSuch {
		t.Errorf("OPEN after the retention: status %d; want 3 (no such envelope)", st)
	}
	if held := c.Held.Load(); held != 1 {
		t.Errorf("%d envelopes held; want 1 (the one never opened)", held)
	}
	for i := 0; i < 3000; i++ {
		e := send(uint64(10 + i))
		open(r1, e)
		open(r2, e)
		now.Add(int64(time.Second)) // each one's retention ends a minute later
	}
	open(r1, never) // one more batch, so that the stage sees the time
	held, queued := c.Held.Load(), c.Queued.Load()
	if held > 62 || queued > 2*held+1024+60 {
		t.Errorf("after 3,000 envelopes opened a second apart with a minute's retention: %d held, %d queued; want ≤ 62 held and the queues within twice that plus 1,084", held, queued)
	}
	p.checkInvariants()
	if live := c.Live.Load(); live != 1 {
		t.Errorf("live %d; want 1", live)
	}
}

// An OPEN whose answer finds its connection gone leaves its share drawn, in
// the envelope's SET and across SETs alike: the share is the user's, and
// the user's next OPEN, on a new connection, answers "already" with it.
func TestUndeliveredOpenShareStays(t *testing.T) {
	p := newPipeline(t, 2, 64, defaultLimits, nil)
	s := p.login(1)                     // SET 1: the envelope's SET
	near, far := p.login(3), p.login(2) // SET 1 (same as the envelope), SET 0 (the answer crosses SETs)
	s.send(1000, []uint32{3, 2}, 1)
	_, env := s.expect(proto.SendAck).SendAck()
	for _, cl := range []*client{near, far} {
		cl.expect(proto.Envelope)
		gone := conn.HandleOf(cl.c)
		released := p.owner.released.Load()
		cl.request(event.KDisconnect, -1, 0, nil)
		waitFor(t, "the release", func() bool { return p.owner.released.Load() > released })
		p.publish(1, func(ev *event.Event) { // the OPEN the ingress decoded just before the disconnect
			ev.Kind, ev.User, ev.Conn, ev.Env, ev.Stamp = event.KOpen, cl.user, gone, env, 5
		})
	}
	waitFor(t, "both answers lost", func() bool {
		return p.ledgers[0].Egress.OpenUntold.Load()+p.ledgers[1].Egress.OpenUntold.Load() == 2
	})
	p.checkInvariants()
	if e := p.stats().Envelopes; e.Opened != 2 || e.OpenedAmount != 1000 || e.LiveAmount != 0 {
		t.Errorf("opened %d, opened_amount %d, live_amount %d; want 2, 1000 and 0: both shares drawn, their users'", e.Opened, e.OpenedAmount, e.LiveAmount)
	}
	var sum uint32
	for _, u := range []uint32{3, 2} {
		cl := p.login(u)
		cl.open(env, 6)
		st, _, share := cl.expect(proto.OpenResult).OpenResult()
		if st != proto.OpenAlready {
			t.Errorf("user %d's OPEN after its answer was lost: status %d; want 1 (already), with its share", u, st)
		}
		sum += share
	}
	if sum != 1000 {
		t.Errorf("the shares told add up to %d; want the envelope's 1000", sum)
	}
	p.checkInvariants()
}
