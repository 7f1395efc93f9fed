package event_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/internal/transport"
	"github.com/hongbao-io/hongbao/ring"
)

// TestBusOverTransports: the Bus gives requests and answers the same room on
// every transport: with the SET's stage stuck, requests are refused once
// fewer than headroom slots would stay free, answers fill the headroom, and
// everything published reaches the stage once it moves.
func TestBusOverTransports(t *testing.T) {
	const size, headroom = 16, 4
	type stuck struct {
		gate chan struct{}
		seen chan event.Kind
	}
	newStage := func() (*stuck, ring.Handler[event.Event]) {
		s := &stuck{gate: make(chan struct{}), seen: make(chan event.Kind, 2*size)}
		return s, ring.HandlerFunc[event.Event](func(b event.Batch) {
			<-s.gate
			for q := b.Lo; q <= b.Hi; q++ {
				s.seen <- b.At(q).Kind
			}
		})
	}
	for _, name := range []string{"ring", "disruptor", "chan"} {
		t.Run(name, func(t *testing.T) {
			st, h := newStage()
			var tr event.Transport
			switch name {
			case "ring":
				r, _ := ring.New[event.Event](ring.Options{Size: size, Producers: ring.MultiProducer})
				r.AddStage(h, ring.StageOptions[event.Event]{})
				tr = r
			case "disruptor":
				d, _ := transport.NewDisruptor[event.Event](transport.Options{Size: size, Stages: 1})
				d.AddStage(h, transport.StageOptions{})
				tr = d
			case "chan":
				c, _ := transport.NewChan[event.Event](transport.Options{Size: size, Stages: 1})
				c.AddStage(h, transport.StageOptions{})
				tr = c
			}
			bus := event.NewBus([]event.Transport{tr}, headroom)
			if err := bus.Ring(0).Start(); err != nil {
				t.Fatal(err)
			}
			requests := 0
			for ; ; requests++ {
				s, ok := bus.ClaimRequest(0)
				if !ok {
					break
				}
				*s.Event() = event.Event{Kind: event.KShake}
				s.Publish()
			}
			if requests != size-headroom {
				t.Errorf("%d requests accepted; want %d", requests, size-headroom)
			}
			answers := 0
			for ; ; answers++ {
				s, ok := bus.ClaimAnswer(0)
				if !ok {
					break
				}
				*s.Event() = event.Event{Kind: event.KAnswer}
				s.Publish()
			}
			if answers != headroom {
				t.Errorf("%d answers accepted into the headroom; want %d", answers, headroom)
			}
			close(st.gate)
			if err := bus.Close(); err != nil {
				t.Fatal(err)
			}
			close(st.seen)
			var kinds []event.Kind
			for k := range st.seen {
				kinds = append(kinds, k)
			}
			if len(kinds) != size || kinds[0] != event.KShake || kinds[size-1] != event.KAnswer {
				t.Errorf("the stage saw %v; want %d shakes then %d answers", kinds, size-headroom, headroom)
			}
		})
	}
}
