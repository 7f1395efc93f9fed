package stages_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/stages"
)

// clock is a fake clock for the SETs: it moves only when the test says.
func clock() *atomic.Int64 {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	return &now
}

// sends has cl SEND total to rcpt n times, at most 64 in flight, and counts
// the answers by status.
func (cl *client) sends(n int, total uint32, rcpt []uint32) (byStatus [4]int, envs []uint64) {
	cl.p.t.Helper()
	for done := 0; done < n; {
		k := min(64, n-done)
		for i := range k {
			cl.send(total, rcpt, uint64(done+i+1))
		}
		for range k {
			st, env := cl.expect(proto.SendAck).SendAck()
			if int(st) >= len(byStatus) {
				cl.p.t.Fatalf("SEND_ACK status %d", st)
			}
			byStatus[st]++
			if st == proto.SendOK {
				envs = append(envs, env)
			}
		}
		done += k
	}
	return byStatus, envs
}

// sendStatus has cl SEND once and returns the status and envelope id.
func (cl *client) sendStatus(total uint32, rcpt []uint32) (uint8, uint64) {
	cl.p.t.Helper()
	cl.send(total, rcpt, 1)
	return cl.expect(proto.SendAck).SendAck()
}

// openShare has cl OPEN env and returns the status and share.
func (cl *client) openShare(env uint64) (uint8, uint32) {
	cl.p.t.Helper()
	cl.open(env, 2)
	st, _, share := cl.expect(proto.OpenResult).OpenResult()
	return st, share
}

// wantSend has cl SEND 10 fen to rcpt, fails the test (saying when) unless
// the SEND_ACK status is want, and returns the envelope id.
func (cl *client) wantSend(want uint8, when string, rcpt ...uint32) uint64 {
	cl.p.t.Helper()
	st, env := cl.sendStatus(10, rcpt)
	if st != want {
		cl.p.t.Errorf("user %d's SEND %s: status %d; want %d", cl.user, when, st, want)
	}
	return env
}

// wantOpen has cl OPEN env and fails the test (saying when) unless the
// OPEN_RESULT status is want.
func (cl *client) wantOpen(env uint64, want uint8, when string) {
	cl.p.t.Helper()
	if st, _ := cl.openShare(env); st != want {
		cl.p.t.Errorf("user %d's OPEN %s: status %d; want %d", cl.user, when, st, want)
	}
}

// logout closes cl's connection as the ingress does and waits for its release.
func (cl *client) logout() {
	cl.p.t.Helper()
	released := cl.p.owner.released.Load()
	cl.request(event.KDisconnect, -1, 0, nil)
	waitFor(cl.p.t, "the connection's release", func() bool { return cl.p.owner.released.Load() > released })
}

// TestSendRateLimit: a SEND flood from one user is answered 0 for its burst,
// then 3; time refills its bucket at the rate and nothing else does: not a
// new connection.
func TestSendRateLimit(t *testing.T) {
	now := clock()
	lim := defaultLimits
	lim.SendRate, lim.SendBurst = 10, 20
	p := newPipeline(t, 2, 256, lim, now.Load)
	s := p.login(1)
	const flood = 5000
	st, _ := s.sends(flood, 10, []uint32{100, 102}) // recipients offline
	if st[proto.SendOK] != 20 || st[proto.SendLimited] != flood-20 {
		t.Errorf("a flood of %d SENDs at one instant: %d ok, %d limited; want the burst, 20, and %d", flood, st[proto.SendOK], st[proto.SendLimited], flood-20)
	}
	e := p.stats().Envelopes
	if e.SendLimited != flood-20 || e.SendLimitedBy.Rate != flood-20 || e.Created != 20 {
		t.Errorf("send_limited %d (by rate %d), created %d; want %d, %d, 20", e.SendLimited, e.SendLimitedBy.Rate, e.Created, flood-20, flood-20)
	}
	t.Logf("flood of %d: %d ok, %d limited; send_limited_by %+v", flood, st[proto.SendOK], st[proto.SendLimited], e.SendLimitedBy)

	now.Add(int64(time.Second))
	if st, _ := s.sends(20, 10, []uint32{100}); st[proto.SendOK] != 10 || st[proto.SendLimited] != 10 {
		t.Errorf("a second later, 20 SENDs: %d ok, %d limited; want 10 (the rate) and 10", st[proto.SendOK], st[proto.SendLimited])
	}

	// A new connection gets the bucket the user left, not a full one.
	s.logout()
	s = p.login(1)
	s.wantSend(proto.SendLimited, "after reconnecting (a reconnect must not refill the bucket)", 100)
	now.Add(int64(100 * time.Millisecond))
	s.wantSend(proto.SendOK, "a token's time later", 100)
	s.wantSend(proto.SendLimited, "right after", 100)
	p.checkInvariants()

	// A full bucket is forgotten: it is the same as none.
	if n := p.stats().Envelopes.Senders; n != 1 {
		t.Errorf("%d users with SEND state; want 1", n)
	}
	now.Add(int64(10 * time.Second))
	p.publish(1, func(ev *event.Event) { ev.Kind = event.KTick })
	waitFor(t, "the full bucket to be forgotten", func() bool { return p.stats().Envelopes.Senders == 0 })
}

// TestLiveCapPerUser: a user with MaxLive live envelopes gets 3 until one of
// them is fully opened or expires.
func TestLiveCapPerUser(t *testing.T) {
	now := clock()
	lim := defaultLimits
	lim.MaxLive, lim.TTL = 3, time.Minute
	p := newPipeline(t, 2, 128, lim, now.Load)
	s, r := p.login(1), p.login(2)
	var envs []uint64
	for range 3 {
		envs = append(envs, s.wantSend(proto.SendOK, "below the cap", 2))
		r.expect(proto.Envelope)
	}
	s.wantSend(proto.SendLimited, "at the cap of 3 live", 2)
	r.wantOpen(envs[0], proto.OpenOK, "of the only share")
	s.wantSend(proto.SendOK, "once one envelope is fully opened", 2)
	r.expect(proto.Envelope)
	s.wantSend(proto.SendLimited, "at the cap again", 2)
	r.wantSend(proto.SendOK, "(another user, not held back by this one's cap)", 1)
	s.expect(proto.Envelope)
	now.Add(int64(time.Minute)) // every envelope expires
	s.wantSend(proto.SendOK, "after its envelopes expired", 2)
	if e := p.stats().Envelopes; e.SendLimitedBy.LiveCap != 2 || e.SendLimited != 2 {
		t.Errorf("send_limited_by.live_cap %d, send_limited %d; want 2, 2", e.SendLimitedBy.LiveCap, e.SendLimited)
	}
	p.checkInvariants()
}

// TestBudget: a SET at its share of the budget answers 3 to any SEND and
// skips system sends; a fully opened envelope makes room, and one kept only
// for a repeated OPEN is forgotten early so that memory stays within it —
// but not before an opener whose answer was lost has had time to OPEN again.
func TestBudget(t *testing.T) {
	now := clock()
	lim := defaultLimits
	lim.MaxEnvelopes, lim.Retain = 4, time.Minute
	p := newPipeline(t, 1, 128, lim, now.Load)
	a, b, r := p.login(1), p.login(2), p.login(3)
	var envs []uint64
	for _, cl := range []*client{a, a, b, b} {
		envs = append(envs, cl.wantSend(proto.SendOK, "within the budget", 3))
		r.expect(proto.Envelope)
	}
	a.wantSend(proto.SendLimited, "with the SET at its budget", 3)
	b.wantSend(proto.SendLimited, "with the SET at its budget", 3)
	p.publish(0, func(ev *event.Event) { ev.Kind, ev.N, ev.Total = event.KSystemSend, 1, 100 })
	waitFor(t, "the system send to be skipped", func() bool { return p.stats().Envelopes.SystemOverBudget == 1 })
	r.wantOpen(envs[0], proto.OpenOK, "of the only share")
	r.wantOpen(envs[0], proto.OpenAlready, "again within the retention")
	// Its answer might have been lost: the envelope is kept for the OPEN
	// sent again, budget or not.
	b.wantSend(proto.SendLimited, "right after an envelope was fully opened", 3)
	now.Add(int64(10 * time.Second))
	b.wantSend(proto.SendOK, "once an envelope was fully opened 10 s ago", 3)
	r.expect(proto.Envelope)
	r.wantOpen(envs[0], proto.OpenNoSuch, "again, the envelope forgotten early for room")
	c := &p.ledgers[0].Split
	if held, live, ev := c.Held.Load(), c.Live.Load(), c.Evicted.Load(); held != 4 || live != 4 || ev != 1 {
		t.Errorf("held %d, live %d, evicted %d; want 4, 4, 1", held, live, ev)
	}
	e := p.stats().Envelopes
	if e.SendLimitedBy.Budget != 3 || e.SystemSkipped != 1 || e.Live != 4 || e.Held != 4 {
		t.Errorf("envelopes %+v; want 3 limited by the budget, 1 system send skipped, 4 live and held", e)
	}
	p.checkInvariants()
}

// TestBudgetBoundsMemory: a flood of SENDs, each to 100 offline users, at
// ten times the budget: the budget's envelopes are made, the rest answered
// 3, and the heap grows by the budget's worth only.
func TestBudgetBoundsMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory blurs the heap figures")
	}
	const sets, perSET, shares = 2, 500, 100
	budget := sets * perSET
	lim := stages.Limits{MaxShares: shares, MaxTotal: 20000, TTL: time.Hour, MaxEnvelopes: perSET}
	p := newPipeline(t, sets, 1024, lim, nil)
	senders := make([]*client, 20) // users 1..20: half in each SET
	for i := range senders {
		senders[i] = p.login(uint32(i + 1))
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	attempts := 10 * budget
	var st [4]int
	rcpt := make([]uint32, shares)
	for k := 0; k < attempts; k += len(senders) {
		for i, cl := range senders {
			for j := range rcpt { // every recipient a new user: the worst case for the kept pushes
				rcpt[j] = uint32(1_000_000 + (k+i)*shares + j)
			}
			cl.send(1000, rcpt, uint64(k+i))
		}
		for _, cl := range senders {
			s, _ := cl.expect(proto.SendAck).SendAck()
			st[s]++
		}
	}
	if st[proto.SendOK] != budget || st[proto.SendLimited] != attempts-budget {
		t.Errorf("%d SENDs: %d ok, %d limited; want the budget, %d, and %d", attempts, st[proto.SendOK], st[proto.SendLimited], budget, attempts-budget)
	}
	waitFor(t, "every push to be kept", func() bool { return p.stats().Envelopes.Pending.Waiting == int64(budget*shares) }) // the ring holds a budget's worth
	after := heap()
	grown := int64(after) - int64(before)
	e := p.stats().Envelopes
	// Per envelope: the group (~50 bytes) with its recipients and shares
	// (800), its map entry and queue slot (~60): 1 KiB with room. Per kept
	// push: its ring slot (16 bytes) and, every recipient being a new user,
	// its user's map entry (~20), each up to twice that while its slice or
	// map grows by doubling: 64. And 2 MiB of slack for the runtime's pools.
	// Were the budget not enforced, the 10× flood would hold ~10 KiB of
	// groups an envelope, over twice this.
	perEnvelope := int64(1024 + shares*64)
	bound := int64(budget)*perEnvelope + 2<<20
	t.Logf("%d SENDs to %d offline users each: %d created, %d limited (budget %d), %d pushes kept for %d users; heap %d → %d bytes: +%d, %d bytes an envelope with its pushes; bound %d",
		attempts, shares, e.Created, e.SendLimitedBy.Budget, budget, e.Pending.Waiting, e.Pending.Users, before, after, grown, grown/int64(budget), bound)
	if grown > bound {
		t.Errorf("the heap grew by %d bytes for a budget of %d envelopes; want at most %d", grown, budget, bound)
	}
	if e.Held != int64(budget) || e.Pending.Dropped != 0 {
		t.Errorf("held %d, pushes dropped %d; want %d, 0", e.Held, e.Pending.Dropped, budget)
	}
	p.checkInvariants()
}

// TestOfflineRecipientGetsPushAtLogin: a recipient offline when a group
// envelope is created gets its ENVELOPE push, stamped with the creation
// time, when it logs in, and opens its share; the money is exact.
func TestOfflineRecipientGetsPushAtLogin(t *testing.T) {
	now := clock()
	p := newPipeline(t, 3, 128, defaultLimits, now.Load)
	s := p.login(1)  // SET 1: the envelope's
	on := p.login(3) // SET 0
	created := now.Load()
	st, env := s.sendStatus(900, []uint32{3, 5}) // 5 (SET 2) is offline
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	on.expect(proto.Envelope)
	waitFor(t, "the push to be kept", func() bool { return p.stats().Envelopes.Pending.Waiting == 1 })
	now.Add(int64(time.Minute))
	off := p.login(5)
	f := off.expect(proto.Envelope)
	if e, from, total, n := f.Envelope(); e != env || from != 1 || total != 900 || n != 2 || f.Stamp != uint64(created) {
		t.Fatalf("ENVELOPE at login: %d from %d, %d fen, %d shares, stamp %d; want %d from 1, 900, 2, the creation time %d",
			e, from, total, n, f.Stamp, env, created)
	}
	var sum uint32
	for _, cl := range []*client{off, on} {
		st, share := cl.openShare(env)
		if st != proto.OpenOK {
			t.Fatalf("user %d's OPEN: status %d", cl.user, st)
		}
		sum += share
	}
	if sum != 900 {
		t.Errorf("shares add up to %d; want 900", sum)
	}
	p.checkInvariants()
	pp := p.stats().Envelopes.Pending
	if pp.Waiting != 0 || pp.Users != 0 || pp.Rechecked != 1 || pp.Repushed != 1 || pp.Stale != 0 {
		t.Errorf("pending pushes %+v; want none waiting, 1 rechecked and pushed", pp)
	}
	// Pushed once: the next login has nothing more.
	off.logout()
	off = p.login(5)
	time.Sleep(20 * time.Millisecond)
	for _, f := range off.drain() {
		t.Errorf("second login: %v; want nothing", f.Type)
	}
	if pp := p.stats().Envelopes.Pending; pp.Rechecked != 1 || pp.Waiting != 0 {
		t.Errorf("after the second login: pending pushes %+v; want still 1 rechecked, none waiting", pp)
	}
	if e := p.stats().Envelopes; e.OpenedAmount != 900 || e.LiveAmount != 0 {
		t.Errorf("opened_amount %d, live_amount %d; want 900, 0", e.OpenedAmount, e.LiveAmount)
	}
}

// TestNoPushWhenNoLongerOpenable: a push kept for an offline user is not
// made at its login once the envelope expired; nor, at the recheck, once it
// is fully opened or opened by that user; it is made for a recipient who has
// not opened it.
func TestNoPushWhenNoLongerOpenable(t *testing.T) {
	now := clock()
	lim := defaultLimits
	lim.TTL = time.Minute
	p := newPipeline(t, 2, 128, lim, now.Load)
	s := p.login(1)
	if st, _ := s.sendStatus(100, []uint32{7}); st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	waitFor(t, "the push to be kept", func() bool { return p.stats().Envelopes.Pending.Waiting == 1 })
	now.Add(int64(time.Minute))
	late := p.login(7)
	waitFor(t, "the recheck", func() bool { return p.stats().Envelopes.Pending.Stale == 1 })
	time.Sleep(20 * time.Millisecond)
	for _, f := range late.drain() {
		t.Errorf("login after the envelope expired: %v; want nothing", f.Type)
	}

	a, b := p.login(2), p.login(4)
	_, full := s.sendStatus(100, []uint32{2})
	_, half := s.sendStatus(100, []uint32{2, 4})
	a.expect(proto.Envelope)
	a.expect(proto.Envelope)
	b.expect(proto.Envelope)
	a.openShare(full)
	a.openShare(half)
	recheck := func(user uint32, env uint64) {
		p.publish(envelope.OwnerSET(env), func(ev *event.Event) { ev.Kind, ev.User, ev.Env = event.KRepush, user, env })
	}
	recheck(2, full) // fully opened
	recheck(2, half) // opened by 2
	recheck(9, half) // not a recipient
	waitFor(t, "the rechecks", func() bool { return p.stats().Envelopes.Pending.Stale == 4 })
	recheck(4, half) // 4 may still open it
	f := b.expect(proto.Envelope)
	if env, _, _, _ := f.Envelope(); env != half {
		t.Errorf("recheck for a recipient who has not opened: ENVELOPE %d; want %d", env, half)
	}
	time.Sleep(20 * time.Millisecond)
	for _, f := range a.drain() {
		t.Errorf("rechecks of envelopes user 2 opened: %v; want nothing", f.Type)
	}
	p.checkInvariants()
}

// TestPendingPerUserKeepsNewest: past its cap, a user's oldest kept pushes
// are dropped and counted; its login brings the newest, oldest first.
func TestPendingPerUserKeepsNewest(t *testing.T) {
	lim := defaultLimits
	lim.PendingPerUser = 4
	p := newPipeline(t, 2, 128, lim, nil)
	s := p.login(1)
	var envs []uint64
	for range 6 {
		_, env := s.sendStatus(10, []uint32{8})
		envs = append(envs, env)
	}
	waitFor(t, "6 pushes to arrive", func() bool { return p.ledgers[0].Session.PushesOffline.Load() == 6 })
	if pp := p.stats().Envelopes.Pending; pp.Waiting != 4 || pp.Dropped != 2 || pp.Users != 1 {
		t.Errorf("pending pushes %+v; want 4 waiting for 1 user, 2 dropped", pp)
	}
	r := p.login(8)
	for _, want := range envs[2:] {
		if env, _, _, _ := r.expect(proto.Envelope).Envelope(); env != want {
			t.Errorf("ENVELOPE %d at login; want %d (the newest 4, oldest first)", env, want)
		}
	}
	// Dropped pushes' envelopes can still be opened by id.
	if st, _ := r.openShare(envs[0]); st != proto.OpenOK {
		t.Errorf("OPEN of an envelope whose push was dropped: status %d; want 0", st)
	}
	p.checkInvariants()
}

// TestUndeliveredPushKept: a push still unwritten in its connection's output
// when the connection goes is kept like a push to someone offline, and made
// at the next login.
func TestUndeliveredPushKept(t *testing.T) {
	p := newPipeline(t, 2, 256, defaultLimits, nil)
	s := p.login(1)
	r := p.login(2) // reads nothing: its socket fills and egress keeps the rest
	for i := 0; p.owner.watched.Load() == 0; i++ {
		if i > 10_000 {
			t.Fatal("the socket of a non-reader never filled")
		}
		s.chat(2, string(make([]byte, 1000)), uint64(i))
		s.expect(proto.ChatAck)
	}
	st, env := s.sendStatus(100, []uint32{2})
	if st != proto.SendOK {
		t.Fatalf("SEND: status %d", st)
	}
	pushed := &p.ledgers[0].Egress.Frames[ledger.FrameIndex(byte(proto.Envelope))]
	waitFor(t, "the push to be appended behind the backlog", func() bool { return pushed.Load() == 1 })
	r.logout()
	waitFor(t, "the push to be kept", func() bool { return p.stats().Envelopes.Pending.Waiting == 1 })
	if pp := p.stats().Envelopes.Pending; pp.Undelivered != 1 {
		t.Errorf("pending pushes %+v; want 1 undelivered", pp)
	}
	r = p.login(2)
	if e, _, _, _ := r.expect(proto.Envelope).Envelope(); e != env {
		t.Fatalf("ENVELOPE %d at login; want %d", e, env)
	}
	if st, share := r.openShare(env); st != proto.OpenOK || share != 100 {
		t.Errorf("OPEN: status %d share %d; want 0, 100", st, share)
	}
	p.checkInvariants()
}
