package campaign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/stages"
)

// sink stands in for the SETs' stages: it counts what the runner deals,
// and keeps each SET's shares and tallies as the stages do.
type sink struct {
	mu       sync.Mutex
	ids      map[uint64]bool // shake envelope ids, each dealt once
	shake    uint64          // shake envelopes received
	amount   uint64          // their amounts, and the send envelopes' totals
	sends    uint64          // system send envelopes received
	perSET   []uint64
	held     []stages.Campaigns // per SET
	received atomic.Uint64      // shake envelopes
}

// tally adds n envelopes of amount fen dealt for campaign id to m.
func tally(m map[uint32]stages.Dealt, id uint32, n, amount uint64) {
	d := m[id]
	d.N += n
	d.Amount += amount
	m[id] = d
}

func (s *sink) handle(set int) ring.HandlerFunc[event.Event] {
	return func(b ring.Batch[event.Event]) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for seq := b.Lo; seq <= b.Hi; seq++ {
			ev := b.At(seq)
			h := &s.held[set]
			switch ev.Kind {
			case event.KShare:
				p := ev.Buf.B
				id := binary.BigEndian.Uint32(p)
				sh, ok := h.Shares[id]
				switch {
				case ev.Status == stages.ShareStart && ok:
					panic("a share taken twice")
				case ev.Status == stages.ShareStart:
					sh = ShareOf(Params{Kind: Shake, Rate: binary.BigEndian.Uint64(p[5:]), Total: binary.BigEndian.Uint64(p[13:]),
						Min: binary.BigEndian.Uint32(p[21:]), Max: binary.BigEndian.Uint32(p[25:])}, 0, 1)
					sh.Send = p[4] == 1
				case !ok || sh.Ended:
					panic("a share ended that was not running")
				default:
					sh.Ended, sh.N, sh.Amount = true, binary.BigEndian.Uint64(p[4:]), binary.BigEndian.Uint64(p[12:])
				}
				h.Shares[id] = sh
				bytebufferpool.Put(ev.Buf)
			case event.KDeal:
				if sh, ok := h.Shares[ev.Peer]; !ok || sh.Ended {
					panic("a deal for a share the SET does not run")
				}
				var sum uint64
				for i := range uint64(ev.N) {
					if s.ids[ev.Env+i] {
						panic("envelope dealt twice")
					}
					s.ids[ev.Env+i] = true
					sum += uint64(binary.BigEndian.Uint32(ev.Buf.B[4*i:]))
				}
				s.amount += sum
				tally(h.Shake, ev.Peer, uint64(ev.N), sum)
				h.Created += uint64(ev.N)
				h.LastShake = max(h.LastShake, ev.Env+uint64(ev.N)-1)
				bytebufferpool.Put(ev.Buf)
				s.shake += uint64(ev.N)
				s.perSET[set] += uint64(ev.N)
				s.received.Add(uint64(ev.N))
			case event.KSystemSend:
				if sh, ok := h.Shares[ev.Peer]; !ok || sh.Ended {
					panic("a send for a share the SET does not run")
				}
				tally(h.Send, ev.Peer, 1, uint64(ev.Total))
				s.sends++
				s.amount += uint64(ev.Total)
				s.perSET[set]++
			}
		}
	}
}

// newRunner returns a Runner over sets rings drained by a sink. Its own
// goroutine ticks once an hour: the tests tick it by hand with dealTick, at
// the times they choose.
func newRunner(t *testing.T, sets int, cfg Config) (*Runner, *sink) {
	t.Helper()
	s := &sink{ids: map[uint64]bool{}, perSET: make([]uint64, sets), held: make([]stages.Campaigns, sets)}
	for i := range s.held {
		s.held[i] = stages.Campaigns{Shares: map[uint32]stages.Share{}, Shake: map[uint32]stages.Dealt{}, Send: map[uint32]stages.Dealt{}}
	}
	rings := make([]*event.Ring, sets)
	for i := range rings {
		r, err := ring.New[event.Event](ring.Options{Size: 64, Producers: ring.MultiProducer})
		if err != nil {
			t.Fatal(err)
		}
		r.AddStage(s.handle(i), ring.StageOptions[event.Event]{Name: "sink"})
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		rings[i] = r
	}
	bus := event.NewBus(rings, 0)
	if cfg.Limits == (Limits{}) {
		cfg.Limits = Limits{MaxRate: 1_000_000, MaxTotal: 1 << 32, MaxShares: 100, MaxAmount: 20000}
	}
	r, err := NewRunner(bus, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.tick = time.Hour
	t.Cleanup(func() { r.Close(); bus.Close() })
	for i := range sets {
		r.Adopt(i, s.held[i])
	}
	return r, s
}

// state is what SET set holds of the campaigns now, as Adopt reads it.
func (s *sink) state(set int) stages.Campaigns {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[set]
	return stages.Campaigns{Shares: maps.Clone(h.Shares), Shake: maps.Clone(h.Shake), Send: maps.Clone(h.Send),
		Forgotten: h.Forgotten, LastShake: h.LastShake, Created: h.Created}
}

// due is what c's shares' pacers say is due at now, summed.
func due(c *Campaign, now time.Time) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for p := range c.held() {
		n += p.base + p.pacer.Due(now.UnixNano())
	}
	return n
}

// settle waits until every dealt event has gone through the sink.
func (s *sink) settle(t *testing.T, r *Runner) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < r.bus.Sets(); i++ {
		for r.bus.Ring(i).Len() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the rings did not drain")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// tickAll deals one tick at now for every running campaign, as the loop does.
func tickAll(r *Runner, now time.Time) {
	r.mu.Lock()
	cs := append([]*Campaign(nil), r.running...)
	r.mu.Unlock()
	if len(cs) > 0 {
		r.dealTick(cs, now)
	}
}

func TestDealsWhatIsDue(t *testing.T) {
	r, s := newRunner(t, 3, Config{})
	c, err := r.Start(Params{Kind: Shake, Rate: 1000, Total: 777, Min: 1, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	now := c.Started
	for _, gap := range []time.Duration{10, 10, 3, 45, 10, 1, 200, 10, 500, 10} {
		now = now.Add(gap * time.Millisecond)
		tickAll(r, now)
		if got, want := c.Status().Dealt, due(c, now); got != want {
			t.Fatalf("at +%v: dealt %d; want the pacers' %d", now.Sub(c.Started), got, want)
		}
	}
	st := c.Status()
	if st.State != Finished || !st.Done || st.Dealt != 777 || st.Waiting != "" || st.Ended.IsZero() {
		t.Fatalf("status %+v; want finished with 777 dealt", st)
	}
	s.settle(t, r)
	if s.shake != 777 || s.amount != st.Amount {
		t.Errorf("the SETs got %d envelopes of %d fen; want 777 of %d", s.shake, s.amount, st.Amount)
	}
	if s.perSET[0] != 259 || s.perSET[1] != 259 || s.perSET[2] != 259 {
		t.Errorf("per SET %v; want 259 each", s.perSET)
	}
	if r.Running() != 0 {
		t.Errorf("%d running; want none", r.Running())
	}
}

// TestDealsFollowTheSETsRunHere: a campaign deals over the SETs run here
// as they are now, not as they were when it started: none to a SET moved
// away, and again to one moved back.
func TestDealsFollowTheSETsRunHere(t *testing.T) {
	r, s := newRunner(t, 3, Config{})
	c, err := r.Start(Params{Kind: Shake, Rate: 1000, Total: 3000, Min: 1, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	ring2 := r.bus.Ring(2)
	now := c.Started
	steps := func(n int) uint64 {
		for range n {
			now = now.Add(30 * time.Millisecond)
			tickAll(r, now)
		}
		s.settle(t, r)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.perSET[2]
	}
	if steps(3) == 0 {
		t.Fatal("SET 2 got nothing while it ran here")
	}
	r.bus.Route(2, ring2, true) // SET 2 moved to another gateway
	gone := steps(1)            // a deal in flight may still reach it
	if n := steps(5); n != gone {
		t.Fatalf("SET 2 got %d envelopes after it moved away", n-gone)
	}
	r.bus.Route(2, ring2, false)
	r.Adopt(2, s.state(2))
	if n := steps(5); n == gone {
		t.Fatal("SET 2 got nothing after it came back")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := c.Status(); s.shake != st.Dealt || s.amount != st.Amount {
		t.Errorf("the SETs got %d envelopes of %d fen; the campaign dealt %d of %d", s.shake, s.amount, st.Dealt, st.Amount)
	}
}

// TestShareGoesOnElsewhere: a SET's share is the SET's: a second runner
// given the SET (a failover, a move) deals exactly what is left of it, and
// a share it ended is never dealt again.
func TestShareGoesOnElsewhere(t *testing.T) {
	a, s := newRunner(t, 2, Config{})
	p := Params{Kind: Shake, Rate: 1000, Total: 1000, Min: 1, Max: 100}
	c, err := a.Start(p)
	if err != nil {
		t.Fatal(err)
	}
	tickAll(a, c.Started.Add(200*time.Millisecond))
	s.settle(t, a)
	a.Close() // its gateway dies: the SETs keep what they hold
	// The second gateway shares the SETs' rings, as a successor shares their journals.
	b, err := NewRunner(a.bus, a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.tick = time.Hour
	t.Cleanup(b.Close)
	if _, err := b.StartAs(c.ID, p); err != nil { // it heard of the campaign
		t.Fatal(err)
	}
	for set := range 2 {
		b.Adopt(set, s.state(set))
	}
	before := s.received.Load()
	if before == 0 || before >= 1000 {
		t.Fatalf("%d dealt before the failover; want some, not all", before)
	}
	tickAll(b, time.Now().Add(10*time.Second))
	s.settle(t, b)
	if got := s.received.Load(); got != 1000 {
		t.Fatalf("%d dealt in all; want exactly 1000", got)
	}
	st, _ := b.Status(c.ID)
	if st.State != Finished || st.Dealt != 1000 || st.Amount != s.amount {
		t.Fatalf("status on the second runner %+v; want finished, 1000 dealt, %d fen", st, s.amount)
	}
	// A third runner given the SETs with the shares ended deals nothing.
	c3, _ := NewRunner(a.bus, a.cfg)
	c3.tick = time.Hour
	t.Cleanup(c3.Close)
	c3.StartAs(c.ID, p)
	for set := range 2 {
		c3.Adopt(set, s.state(set))
	}
	tickAll(c3, time.Now().Add(20*time.Second))
	s.settle(t, c3)
	if got := s.received.Load(); got != 1000 {
		t.Fatalf("%d dealt after the shares ended; want still 1000", got)
	}
}

// TestPoolBudget: a shake campaign far larger than the pool budget deals
// only while the envelopes in the pools (dealt, less taken) are fewer than
// MaxPool, catches up at most a tick's worth beyond what falls due, and in
// the end deals every envelope exactly once.
func TestPoolBudget(t *testing.T) {
	const maxPool, total = 1000, 20_000
	var taken [4]atomic.Uint64
	r, s := newRunner(t, 4, Config{MaxPool: maxPool, Taken: func(set int) uint64 { return taken[set].Load() }})
	c, err := r.Start(Params{Kind: Shake, Rate: 100_000, Total: total, Min: 1, Max: 10}) // 1,000 a tick
	if err != nil {
		t.Fatal(err)
	}
	now := c.Started
	prev := uint64(0)
	for i := 0; c.State() == Running; i++ {
		if i > 10_000 {
			t.Fatalf("still running after %d ticks: %+v", i, c.Status())
		}
		now = now.Add(10 * time.Millisecond)
		tickAll(r, now)
		st := c.Status()
		var pool uint64
		for set := range taken {
			pool += r.dealtTo[set].Load() - taken[set].Load()
		}
		if pool > maxPool {
			t.Fatalf("tick %d: %d in the pools; want ≤ %d", i, pool, maxPool)
		}
		if i < 5 {
			if st.Waiting != "pool full" && st.Dealt < due(c, now) {
				t.Fatalf("tick %d: %+v behind its pacers without saying why", i, st)
			}
			continue // nobody shakes: the pool stays full
		}
		if st.Dealt-prev > 2*1000 {
			t.Fatalf("tick %d: %d dealt in one tick; want at most two ticks' worth (2000)", i, st.Dealt-prev)
		}
		prev = st.Dealt
		if i%3 == 0 { // shakers take a part of the pools now and then
			s.settle(t, r)
			for set := range taken {
				dealt := r.dealtTo[set].Load()
				taken[set].Store(dealt - min(dealt, maxPool/3/4))
			}
		}
	}
	if c.Status().Dealt != total {
		t.Fatalf("%+v; want all %d dealt", c.Status(), total)
	}
	s.settle(t, r)
	if s.shake != total || s.amount != c.Status().Amount || len(s.ids) != total {
		t.Errorf("the SETs got %d envelopes (%d ids) of %d fen; want %d of %d", s.shake, len(s.ids), s.amount, total, c.Status().Amount)
	}
}

// TestCatchUp: a campaign that waited for room deals what falls due and one
// tick's worth of its backlog a tick, never the whole backlog at once.
func TestCatchUp(t *testing.T) {
	var taken [2]atomic.Uint64
	r, s := newRunner(t, 2, Config{MaxPool: 1000, Taken: func(set int) uint64 { return taken[set].Load() }})
	c, err := r.Start(Params{Kind: Shake, Rate: 10_000, Total: 1 << 20, Min: 1, Max: 1}) // 100 a tick
	if err != nil {
		t.Fatal(err)
	}
	tick := func(i int) uint64 {
		before := c.Status().Dealt
		tickAll(r, c.Started.Add(time.Duration(i)*10*time.Millisecond))
		return c.Status().Dealt - before
	}
	for i := 1; i <= 50; i++ { // the pool fills at tick 10; 40 ticks of backlog
		tick(i)
	}
	if st := c.Status(); st.Dealt != 1000 || st.Waiting != "pool full" {
		t.Fatalf("%+v; want 1000 dealt, waiting", st)
	}
	shaken := func() { // every envelope dealt is shaken
		for set := range taken {
			taken[set].Store(r.dealtTo[set].Load())
		}
	}
	shaken()
	for i := 51; i <= 55; i++ {
		if n := tick(i); n != 200 {
			t.Fatalf("tick %d after the pool emptied: %d dealt; want 200 (100 due, 100 of the backlog)", i, n)
		}
		shaken()
	}
	if st := c.Status(); st.Waiting != "" {
		t.Errorf("%+v; want not waiting once dealing again", st)
	}
	s.settle(t, r)
}

func TestHeldBudget(t *testing.T) {
	var held atomic.Uint64
	r, s := newRunner(t, 2, Config{MaxLive: 50, Live: held.Load})
	c, err := r.Start(Params{Kind: Send, Rate: 10_000, Total: 1000, Min: 3, Max: 30, Recipients: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := c.Started.Add(10 * time.Millisecond)
	tickAll(r, now)
	held.Store(c.Status().Dealt)
	tickAll(r, now.Add(10*time.Millisecond))
	if st := c.Status(); st.Dealt != 50 || st.Waiting != "envelopes full" {
		t.Fatalf("%+v; want 50 dealt, waiting for envelopes", st)
	}
	held.Store(0)
	tickAll(r, now.Add(20*time.Millisecond))
	if st := c.Status(); st.Dealt != 100 || st.Waiting != "envelopes full" {
		t.Fatalf("%+v; want 100 dealt (the budget again)", st)
	}
	s.settle(t, r)
	if s.sends != 100 {
		t.Errorf("the SETs got %d send envelopes; want 100", s.sends)
	}
}

func TestCancel(t *testing.T) {
	r, s := newRunner(t, 2, Config{})
	c, err := r.Start(Params{Kind: Shake, Rate: 1000, Total: 1 << 32, Min: 1, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	tickAll(r, c.Started.Add(50*time.Millisecond))
	st, err := r.Cancel(c.ID)
	if err != nil || st.State != Cancelled || !st.Done || st.Dealt != 50 {
		t.Fatalf("Cancel: %+v, %v; want cancelled after 50 dealt", st, err)
	}
	tickAll(r, c.Started.Add(time.Second))
	if got := c.Status().Dealt; got != 50 {
		t.Errorf("%d dealt after the cancel; want still 50", got)
	}
	if again, err := r.Cancel(c.ID); err != nil || again != st {
		t.Errorf("second Cancel: %+v, %v; want the same status, no error", again, err)
	}
	if _, err := r.Cancel(99); !errors.Is(err, ErrNotFound) {
		t.Errorf("Cancel(99): %v; want ErrNotFound", err)
	}
	d, _ := r.Start(Params{Kind: Shake, Rate: 1000, Total: 5, Min: 1, Max: 100})
	tickAll(r, d.Started.Add(time.Second))
	if st, err := r.Cancel(d.ID); !errors.Is(err, ErrFinished) || st.State != Finished {
		t.Errorf("Cancel of a finished campaign: %+v, %v; want ErrFinished", st, err)
	}
	s.settle(t, r)
	if s.shake != 55 || s.amount != c.Status().Amount+d.Status().Amount {
		t.Errorf("the SETs got %d envelopes of %d fen; want 55, the campaigns' %d", s.shake, s.amount, c.Status().Amount+d.Status().Amount)
	}
}

func TestTooMany(t *testing.T) {
	r, _ := newRunner(t, 1, Config{MaxRunning: 2})
	p := Params{Kind: Shake, Rate: 1, Total: 100, Min: 1, Max: 1}
	a, _ := r.Start(p)
	r.Start(p)
	_, err := r.Start(p)
	var tooMany *TooManyError
	if !errors.As(err, &tooMany) || tooMany.Max != 2 {
		t.Fatalf("third Start: %v; want a TooManyError naming 2", err)
	}
	r.Cancel(a.ID)
	if _, err := r.Start(p); err != nil {
		t.Errorf("Start after a cancel: %v", err)
	}
}

func TestFinishedBounded(t *testing.T) {
	r, _ := newRunner(t, 1, Config{KeepFinished: 10})
	for range 25 {
		c, err := r.Start(Params{Kind: Shake, Rate: 1, Total: 100, Min: 1, Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.Cancel(c.ID)
	}
	live, _ := r.Start(Params{Kind: Shake, Rate: 1, Total: 100, Min: 1, Max: 1})
	list := r.List()
	if len(list) != 11 || list[0].ID != 16 || list[9].ID != 25 || list[10].ID != live.ID || list[10].State != Running {
		var ids []string
		for _, st := range list {
			ids = append(ids, fmt.Sprintf("%d %s", st.ID, st.State))
		}
		t.Fatalf("List: %d campaigns %v; want the last 10 cancelled (16..25) and the running one", len(list), ids)
	}
	if _, err := r.Cancel(15); !errors.Is(err, ErrNotFound) {
		t.Errorf("Cancel of a forgotten campaign: %v; want ErrNotFound", err)
	}
}

// TestOneGoroutine: the runner's goroutine deals for every campaign.
func TestOneGoroutine(t *testing.T) {
	r, s := newRunner(t, 4, Config{})
	r.tick = 10 * time.Millisecond
	before := runtime.NumGoroutine()
	const n = 500
	cs := make([]*Campaign, n)
	for i := range cs {
		var err error
		if cs[i], err = r.Start(Params{Kind: Shake, Rate: 100, Total: 1 << 20, Min: 1, Max: 1}); err != nil {
			t.Fatal(err)
		}
	}
	after := runtime.NumGoroutine()
	t.Logf("goroutines: %d before %d campaigns, %d after", before, n, after)
	if after > before+1 {
		t.Errorf("%d goroutines more for %d campaigns; want one", after-before, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range cs {
		for c.Status().Dealt == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("campaign %d dealt nothing", c.ID)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, c := range cs {
		r.Cancel(c.ID)
	}
	s.settle(t, r)
}

// TestEndedStatusIsFinal: a status that says a campaign ended shows all it
// dealt, however its read interleaves with the tick that ends it.
func TestEndedStatusIsFinal(t *testing.T) {
	r, _ := newRunner(t, 2, Config{})
	for range 300 {
		c, err := r.Start(Params{Kind: Shake, Rate: 1_000_000, Total: 50, Min: 1, Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			tickAll(r, c.Started.Add(time.Second))
		}()
		for ended := false; !ended; {
			st := c.Status()
			if ended = st.Done; ended && (st.Dealt != st.Total || st.Amount != st.Total) {
				t.Fatalf("status %+v: ended with %d of %d dealt, %d fen", st, st.Dealt, st.Total, st.Amount)
			}
		}
		<-done
	}
}
