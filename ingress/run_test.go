//go:build linux

package ingress_test

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// orderStage is the only stage of a fused SET ring: it answers logins as a
// recorder does and checks that each user's SHAKEs arrive once each, in the
// order sent. Its plain fields are touched only by whoever holds the ring's
// run claim (a loop or the ring's goroutine): the race detector checks that
// the claim orders them.
type orderStage struct {
	t      *testing.T
	rec    *recorder
	next   map[uint32]uint64 // the stamp each user's next SHAKE must carry
	shakes int
	seen   *atomic.Int64 // SHAKEs of every SET

	onLoop, onRing atomic.Int64 // batches run by an ingress loop, by the ring's goroutine
}

func (s *orderStage) Handle(b event.Batch) {
	if ranByLoop() {
		s.onLoop.Add(1)
	} else {
		s.onRing.Add(1)
	}
	s.rec.Handle(b)
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		if ev.Kind != event.KShake {
			continue
		}
		if want := s.next[ev.User]; ev.Stamp != want {
			s.t.Errorf("user %d: SHAKE %d; want %d (lost, duplicated or reordered)", ev.User, ev.Stamp, want)
		}
		s.next[ev.User] = ev.Stamp + 1
		s.shakes++
		s.seen.Add(1)
	}
}

// ranByLoop reports whether an ingress loop is running the caller.
func ranByLoop() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "ingress.(*loop).runSETs") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestLoopRunsSETs: with fused SET rings, the epoll loops run the batches of
// the SETs they publish into, while another goroutine keeps publishing into
// the same rings with a wake-up, so that the SETs' goroutines race the loops
// for the run claim. Every SHAKE must reach its SET's stage exactly once,
// each user's in the order sent, and both kinds of runner must have run
// batches.
func TestLoopRunsSETs(t *testing.T) {
	const sets, users, perUser, chunk = 4, 16, 400, 8
	var seen atomic.Int64
	var rings []*event.Ring
	var stages []*orderStage
	for set := range sets {
		r, err := ring.New[event.Event](ring.Options{Size: 8192, Producers: ring.MultiProducer, Fused: true, Spins: -1, Yields: -1})
		if err != nil {
			t.Fatal(err)
		}
		st := &orderStage{t: t, rec: &recorder{set: set, blocked: make(chan struct{}, 1), gate: make(chan struct{})},
			next: map[uint32]uint64{}, seen: &seen}
		for u := uint32(1); u <= users; u++ {
			st.next[u] = 1
		}
		r.AddStage(st, ring.StageOptions[event.Event]{Name: "order", MaxBatch: 5})
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		rings, stages = append(rings, r), append(stages, st)
	}
	bus := event.NewBus(rings, 8)
	t.Cleanup(func() { bus.Close() })
	ing := serve(t, ingress.Options{Mode: ingress.ModeEpoll, Bus: bus, Loops: 2})

	stop := make(chan struct{})
	var noise sync.WaitGroup
	noise.Add(1)
	go func() { // ticks published the ordinary way: they wake the SETs' goroutines
		defer noise.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, r := range rings {
				if hi, err := r.TryClaim(1); err == nil {
					*r.At(hi) = event.Event{Kind: event.KTick}
					r.Publish(hi, hi)
				}
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	defer func() { close(stop); noise.Wait() }()

	var clients []*client
	for u := uint32(1); u <= users; u++ {
		c := dial(t, ing)
		c.send(loginFrame(1000, u))
		c.expect(proto.LoginAck, 1000)
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := uint64(1); s <= perUser; s += chunk {
				var frames [][]byte
				for k := range uint64(chunk) {
					frames = append(frames, proto.AppendShake(nil, s+k))
				}
				c.send(frames...)
				if i%2 == 0 {
					time.Sleep(50 * time.Microsecond) // some rounds with a few events, some with many
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every SHAKE at its SET", func() bool { return seen.Load() == users*perUser })
	if n := ing.Stats().Overload.Shake; n != 0 {
		t.Errorf("%d SHAKEs answered overloaded", n)
	}
	// Both ran batches (summed over the SETs: which SET a busy machine's
	// scheduler leaves to its goroutine is chance).
	var onLoop, onRing int64
	for _, st := range stages {
		onLoop, onRing = onLoop+st.onLoop.Load(), onRing+st.onRing.Load()
	}
	if onLoop == 0 || onRing == 0 {
		t.Errorf("%d batches run by a loop, %d by the SETs' goroutines; want both", onLoop, onRing)
	}
}
