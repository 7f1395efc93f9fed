package stages_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
)

// sink reads everything sent to cl into a fixed buffer, allocating nothing,
// so that allocation counts measure the server side alone. It stops before
// the test closes cl's descriptor: a reader left behind could read from the
// next test's socket once the number is reused.
func sink(cl *client) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 64<<10)
		for {
			n, err := unix.Read(cl.fd, b)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 || err != nil {
				return
			}
		}
	}()
	cl.p.t.Cleanup(func() { // before login's cleanup closes cl.fd: cleanups run last first
		unix.Shutdown(cl.fd, unix.SHUT_RDWR)
		<-done
	})
}

func TestAllocsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	t.Run("memory", func(t *testing.T) { allocsPerRequest(t, false, 2000) })
	// A money answer held for its sync and journalled on the way.
	t.Run("journal", func(t *testing.T) { allocsPerRequest(t, true, 300) })
}

func allocsPerRequest(t *testing.T, journalled bool, runs int) {
	p := newJournalled(t, 2, 256, defaultLimits, nil, journalled)
	a, b := p.login(1), p.login(2) // SETs 1 and 0
	amounts := make([]uint32, 64)
	for i := range amounts {
		amounts[i] = 1
	}
	for i := uint64(0); i < 200; i++ { // 12,800 envelopes for SET 1's pool
		p.deal(1, 1+i*64, amounts)
	}
	// An envelope of SET 0 that user 1 has opened: further OPENs answer
	// "already" from SET 0 back to user 1's SET 1 through the outbox.
	b.send(10, []uint32{1}, 1)
	_, env := b.expect(proto.SendAck).SendAck()
	a.expect(proto.Envelope)
	a.open(env, 2)
	a.expect(proto.OpenResult)
	sink(a)
	frames := func() uint64 {
		return p.ledgers[1].Egress.Frames[ledger.FrameIndex(byte(proto.ShakeResult))].Load() +
			p.ledgers[1].Egress.Frames[ledger.FrameIndex(byte(proto.OpenResult))].Load()
	}
	f := func(name string, req func()) {
		t.Helper()
		req() // warm up: buffers pooled, maps sized
		allocs := testing.AllocsPerRun(runs, func() {
			before := frames()
			req()
			for frames() == before { // wait until egress wrote the answer
				runtime.Gosched()
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per request; want 0", name, allocs)
		}
	}
	f("SHAKE", func() { a.shake(3) })
	f("OPEN across SETs", func() { a.request(event.KOpen, 0, 4, func(ev *event.Event) { ev.Env = env }) })
	// With request ids: each SHAKE's answer kept (the table sized by the
	// warm-up's growth), then one retried, answered from it.
	sec, n := time.Now().Unix(), uint32(0)
	for range 2 * runs { // the table grows to hold the runs' answers before they are measured
		n++
		a.request(event.KShake, -1, 5, func(ev *event.Event) { ev.SetReq(proto.NewRequestID(sec, n)) })
	}
	f("SHAKE with a request id", func() {
		n++
		a.request(event.KShake, -1, 5, func(ev *event.Event) { ev.SetReq(proto.NewRequestID(sec, n)) })
	})
	f("SHAKE retried with its id", func() {
		a.request(event.KShake, -1, 6, func(ev *event.Event) { ev.SetReq(proto.NewRequestID(sec, n)) })
	})
}

// TestAllocsPerLimitedSend: the SENDs a flood is answered 3 for, over the
// rate or over the budget, allocate nothing: the per-user state is a map
// sized by the first ones.
func TestAllocsPerLimitedSend(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	lim := defaultLimits
	lim.SendRate, lim.SendBurst, lim.MaxEnvelopes, lim.TTL = 0.001, 1, 1, time.Hour
	p := newPipeline(t, 2, 256, lim, nil)
	a, b := p.login(1), p.login(3) // both SET 1
	if st, _ := a.sendStatus(10, []uint32{5}); st != 0 {
		t.Fatalf("first SEND: status %d", st) // the SET's budget of 1 is used up
	}
	sink(a)
	sink(b)
	acks := &p.ledgers[1].Egress.Frames[ledger.FrameIndex(byte(proto.SendAck))]
	limited := func(cl *client) func() {
		return func() {
			before := acks.Load()
			cl.send(10, []uint32{5, 7}, 9)
			for acks.Load() == before {
				runtime.Gosched()
			}
		}
	}
	for _, tc := range []struct {
		name string
		req  func()
	}{{"SEND over the rate", limited(a)}, {"SEND over the budget", limited(b)}} {
		tc.req() // warm up
		if allocs := testing.AllocsPerRun(2000, tc.req); allocs != 0 {
			t.Errorf("%s: %v allocations per request; want 0", tc.name, allocs)
		}
	}
	if by := p.stats().Envelopes.SendLimitedBy; by.Rate < 2000 || by.Budget < 2000 {
		t.Errorf("send_limited_by %+v; want ≥ 2000 by the rate and by the budget", by)
	}
}

// TestAllocsPerSendOpened: a SEND within every limit, its push and its OPEN
// allocate nothing in the steady state: the group of an envelope forgotten
// after its retention is reused, and the per-user state, the queues and the
// maps are sized by the first rounds.
func TestAllocsPerSendOpened(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	lim := defaultLimits
	lim.SendRate, lim.SendBurst, lim.MaxLive, lim.MaxEnvelopes = 1, 1, 1, 2
	lim.TTL, lim.Retain = 4*time.Second, time.Second
	p := newPipeline(t, 2, 256, lim, now.Load)
	a, b := p.login(1), p.login(3) // both SET 1
	_, env := a.sendStatus(10, []uint32{3})
	b.expect(proto.Envelope)
	b.wantOpen(env, proto.OpenOK, "of the only share")
	sink(a)
	sink(b)
	opens := &p.ledgers[1].Egress.Frames[ledger.FrameIndex(byte(proto.OpenResult))]
	round := func() {
		now.Add(int64(2 * time.Second)) // a token refilled, the last envelope past its retention
		env++                           // a SET's ids count up by one
		before := opens.Load()
		a.send(10, []uint32{3}, 7)
		b.open(env, 8)
		for opens.Load() == before {
			runtime.Gosched()
		}
	}
	for range 100 {
		round() // warm up: maps, queues and the free groups sized
	}
	if allocs := testing.AllocsPerRun(2000, round); allocs != 0 {
		t.Errorf("SEND, its push and its OPEN: %v allocations per round; want 0", allocs)
	}
	if e := p.stats().Envelopes; e.Opened != 2102 || e.SendLimited != 0 || e.Held > 2 {
		t.Errorf("envelopes %+v; want 2,102 opened (a first, 100 to warm up, 2,001 measured), none limited, at most 2 held", e)
	}
}
