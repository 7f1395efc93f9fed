package set_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

var limits = stages.Limits{MaxShares: 100, MaxTotal: 20000, TTL: time.Hour}

// TestBuild: on every transport, each SET's stages run in its transport and
// write its own ledger: envelopes dealt into SET i land in SET i's pool.
func TestBuild(t *testing.T) {
	for _, pipeline := range []string{"ring", "disruptor", "chan"} {
		t.Run(pipeline, func(t *testing.T) {
			const sets = 3
			bus, ss, err := set.Build(sets, set.Options{Ring: 64, Pipeline: pipeline, Limits: limits, MaxPending: 64 << 10, Fused: true})
			if err != nil {
				t.Fatal(err)
			}
			if bus.Sets() != sets || len(ss) != sets {
				t.Fatalf("%d SETs on the bus, %d built; want %d", bus.Sets(), len(ss), sets)
			}
			for i := range sets {
				if err := bus.Ring(i).Start(); err != nil {
					t.Fatal(err)
				}
			}
			for i := range sets {
				r := bus.Ring(i)
				seq, err := r.Claim(1)
				if err != nil {
					t.Fatal(err)
				}
				ev := r.At(seq)
				*ev = event.Event{Kind: event.KDeal, Env: uint64(i+1) << 20, N: uint16(i + 1), Buf: bytebufferpool.Get()}
				for range i + 1 {
					ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, 7)
				}
				r.Publish(seq, seq)
			}
			if err := bus.Close(); err != nil { // drains every event through every stage
				t.Fatal(err)
			}
			for i, l := range set.Ledgers(ss) {
				if l != ss[i].Ledger() {
					t.Errorf("Ledgers()[%d] is not SET %d's ledger", i, i)
				}
				if n, amt := l.Shake.Pool.Load(), l.Shake.PoolAmount.Load(); n != uint64(i+1) || amt != uint64(7*(i+1)) {
					t.Errorf("SET %d's pool: %d envelopes, %d fen; want %d, %d", i, n, amt, i+1, 7*(i+1))
				}
			}
		})
	}
}

// TestGoroutines: only our ring fuses a SET's stages on one goroutine.
func TestGoroutines(t *testing.T) {
	for _, tc := range []struct {
		o    set.Options
		want int
	}{
		{set.Options{Fused: true}, 1},
		{set.Options{Pipeline: "ring", Fused: true}, 1},
		{set.Options{Pipeline: "ring"}, set.Stages},
		{set.Options{Pipeline: "chan", Fused: true}, set.Stages},
		{set.Options{Pipeline: "disruptor", Fused: true}, set.Stages},
	} {
		if got := tc.o.Goroutines(); got != tc.want {
			t.Errorf("%q fused %v: %d goroutines; want %d", tc.o.Pipeline, tc.o.Fused, got, tc.want)
		}
	}
}

// TestMisuse: an unknown pipeline, or stages added for a bus the SET is not
// on, are errors rather than a SET wired wrong.
func TestMisuse(t *testing.T) {
	if _, _, err := set.Build(1, set.Options{Ring: 64, Pipeline: "none", Limits: limits}); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("pipeline none: %v; want an error naming it", err)
	}
	a, err := set.New(0, set.Options{Ring: 64, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	b, err := set.New(0, set.Options{Ring: 64, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus([]event.Transport{b.Transport()}, 8)
	if err := a.AddStages(bus); err == nil {
		t.Error("stages added for another SET's bus")
	}
	if err := b.AddStages(bus); err != nil {
		t.Errorf("stages added for its own bus: %v", err)
	}
}

// TestRenew: a SET that ran and stopped is renewed blank — a zero ledger,
// empty stages on a new transport — journaling to the same producers, so
// that its records keep their producer ids wherever it runs next.
func TestRenew(t *testing.T) {
	j, err := journal.Open(journal.Options{Dir: t.TempDir(), Sets: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	bus, ss, err := set.Build(2, set.Options{Ring: 64, Limits: limits, MaxPending: 64 << 10, Fused: true, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	deal := func(r event.Transport) {
		seq, err := r.Claim(1)
		if err != nil {
			t.Fatal(err)
		}
		ev := r.At(seq)
		*ev = event.Event{Kind: event.KDeal, Env: 1 << 20, N: 1, Buf: bytebufferpool.Get()}
		ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, 7)
		r.Publish(seq, seq)
	}
	old := ss[0]
	if err := old.Transport().Start(); err != nil {
		t.Fatal(err)
	}
	deal(old.Transport())
	if err := old.Transport().Close(); err != nil {
		t.Fatal(err)
	}
	if old.Ledger().Shake.Pool.Load() != 1 {
		t.Fatal("the deal did not reach the SET")
	}
	n, err := old.Renew(bus)
	if err != nil {
		t.Fatal(err)
	}
	if n.Transport() == old.Transport() || n.Ledger() == old.Ledger() || n.Ledger().Shake.Pool.Load() != 0 || n.PIDs() != old.PIDs() || n.Index() != 0 {
		t.Fatalf("renewed: same transport %v, same ledger %v, pool %d, producers %v (were %v); want new, zero, the same producers",
			n.Transport() == old.Transport(), n.Ledger() == old.Ledger(), n.Ledger().Shake.Pool.Load(), n.PIDs(), old.PIDs())
	}
	bus.Route(0, n.Transport(), false)
	if err := n.Transport().Start(); err != nil {
		t.Fatal(err)
	}
	deal(n.Transport())
	if err := n.Transport().Close(); err != nil {
		t.Fatal(err)
	}
	if got := n.Ledger().Shake.Pool.Load(); got != 1 {
		t.Fatalf("the renewed SET's pool holds %d envelopes; want the 1 dealt into it", got)
	}
}
