package ingress_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// drain is a stage that consumes events as an egress would: it puts their
// buffers back, allocating nothing, and counts the answers.
type drain struct{ answers *atomic.Int64 }

func (d drain) Handle(b event.Batch) {
	for seq := b.Lo; seq <= b.Hi; seq++ {
		ev := b.At(seq)
		switch {
		case ev.Kind == event.KAnswer && ev.Buf != nil: // refusals, one after another
			d.answers.Add(int64(countFrames(ev.Buf.B)))
		case ev.Kind == event.KAnswer:
			d.answers.Add(1)
		}
		if ev.Buf != nil {
			bytebufferpool.Put(ev.Buf)
			ev.Buf = nil
		}
	}
}

// requestStream is one frame of each logged-in request type.
func requestStream(t testing.TB) []byte {
	gen, err := envelope.NewGroupIDGen(0, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	b := proto.AppendShake(nil, 1)
	b = proto.AppendOpen(b, 2, gen.Next())
	b = proto.AppendOpen(b, 3, 1<<63|5) // no SET owns it: answered by the ingress
	b = proto.AppendSend(b, 4, 100, []uint32{2, 4, 6, 8})
	b = proto.AppendChat(b, 5, 8, []byte("a chat message of some length"))
	return proto.AppendPing(b, 6)
}

// allocBus makes 2 SETs of size slots; a request must leave headroom free.
func allocBus(t testing.TB, size, headroom int, answers *atomic.Int64) *event.Bus {
	var rings []*event.Ring
	for range 2 {
		r, err := ring.New[event.Event](ring.Options{Size: size, Producers: ring.MultiProducer})
		if err != nil {
			t.Fatal(err)
		}
		r.AddStage(drain{answers}, ring.StageOptions[event.Event]{})
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		rings = append(rings, r)
	}
	bus := event.NewBus(rings, headroom)
	t.Cleanup(func() { bus.Close() })
	return bus
}

// TestAllocsPerFrame: decoding a frame and publishing its event allocates
// nothing in steady state, for every request type, and neither do the
// overload answers of a full ring and of a read that waited too long, nor
// the CHAT rate and its CHAT_ACK 3.
func TestAllocsPerFrame(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("instrumentation allocates")
	}
	stream := requestStream(t)
	var bus *event.Bus
	consume := func(tc *ingress.TestConn) {
		for b := stream; len(b) > 0; {
			n, stalled := tc.Consume(b, 1)
			b = b[n:]
			if stalled {
				runtime.Gosched() // let the stage free slots
			}
		}
		// Steady state: the stage puts the buffers back before the next
		// round takes them, as an egress keeping up does.
		for bus != nil && bus.Ring(0).Len()+bus.Ring(1).Len() > 0 {
			runtime.Gosched()
		}
	}
	// The ingress answers wantAnswers of each stream's 6 frames itself, in
	// 1002 streams (AllocsPerRun's 1000, its warm-up and ours), less fewer.
	f := func(name string, size, headroom int, shed bool, chatRate float64, chatBurst int, wantAnswers, fewer int64) {
		var answers atomic.Int64
		bus = allocBus(t, size, headroom, &answers)
		ing, err := ingress.New(ingress.Options{Listen: []string{"127.0.0.1:0"}, Bus: bus, ChatRate: chatRate, ChatBurst: chatBurst})
		if err != nil {
			t.Fatal(err)
		}
		defer ing.Close()
		tc := ing.NewTestConn(7)
		tc.Shed(shed)
		consume(tc) // warm up the pools
		if allocs := testing.AllocsPerRun(1000, func() { consume(tc) }); allocs != 0 {
			t.Errorf("%s: %v allocations per %d frames; want 0", name, allocs, 6)
		}
		if got, want := answers.Load(), wantAnswers*1002-fewer; got != want {
			t.Errorf("%s: %d answers made by the ingress; want %d", name, got, want)
		}
	}
	f("ring with room", 4096, 16, false, 0, 0, 1, 0)                  // the OPEN of a shake id
	f("requests refused: overload answers", 8, 8, false, 0, 0, 5, 0)  // and SHAKE, OPEN, SEND, CHAT refused
	f("a late read: SHAKE and CHAT shed", 4096, 16, true, 0, 0, 3, 0) // and the OPEN of a shake id
	// Every frame comes at now 1: a bucket of 2,000 at a CHAT a nanosecond
	// has a token for each; at one an hour only the first CHAT, ours, has.
	f("CHATs within the rate", 4096, 16, false, 1e9, 2000, 1, 0)
	f("CHATs over the rate: CHAT_ACK 3", 4096, 16, false, 1.0/3600, 1, 2, 1)

	bus = nil
	ing, err := ingress.New(ingress.Options{Listen: []string{"127.0.0.1:0"}, Bare: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ing.Close()
	tc := ing.NewTestConn(7)
	consume(tc)
	if allocs := testing.AllocsPerRun(1000, func() { tc.ResetOut(); consume(tc) }); allocs != 0 {
		t.Errorf("Bare: %v allocations per %d frames; want 0", allocs, 6)
	}
}

func BenchmarkConsume(b *testing.B) {
	stream := requestStream(b)
	for _, bare := range []bool{false, true} {
		name := "rings"
		o := ingress.Options{Listen: []string{"127.0.0.1:0"}, Bare: bare}
		if bare {
			name = "bare"
		} else {
			o.Bus = allocBus(b, 1<<14, 16, new(atomic.Int64))
		}
		b.Run(name, func(b *testing.B) {
			ing, err := ingress.New(o)
			if err != nil {
				b.Fatal(err)
			}
			defer ing.Close()
			tc := ing.NewTestConn(7)
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				tc.ResetOut()
				for d := stream; len(d) > 0; {
					n, stalled := tc.Consume(d, 1)
					d = d[n:]
					if stalled {
						runtime.Gosched()
					}
				}
			}
		})
	}
}
