package envelope

import (
	"math/rand/v2"
	"testing"
	"time"
)

var nowNs = time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC).UnixNano()

func TestOwnerRoundTrip(t *testing.T) {
	for _, now := range []int64{idEpoch, nowNs, idEpoch + (1<<groupSeqBits-3)*groupUnit} {
		for set := range MaxSETs {
			g, err := NewGroupIDGen(set, now)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				id := g.Next()
				if id == 0 || IsShake(id) || OwnerSET(id) != set {
					t.Fatalf("set %d: id %#x: IsShake %v OwnerSET %d", set, id, IsShake(id), OwnerSET(id))
				}
			}
		}
	}
}

func TestShakeIDs(t *testing.T) {
	for _, now := range []int64{idEpoch, nowNs, idEpoch + (1<<shakeSeqBits-3)*shakeUnit} {
		for set := range MaxSETs {
			g, err := NewShakeIDGen(set, now)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				id := g.Next()
				if !IsShake(id) || OwnerSET(id) != -1 || int(id>>shakeSeqBits&(MaxSETs-1)) != set {
					t.Fatalf("set %d: id %#x: IsShake %v OwnerSET %d", set, id, IsShake(id), OwnerSET(id))
				}
			}
		}
	}
	if OwnerSET(0) != -1 || IsShake(0) {
		t.Fatalf("id 0: OwnerSET %d IsShake %v; want -1, false", OwnerSET(0), IsShake(0))
	}
}

// TestIDNeverZero starts SET 0 at the very epoch, where its sequence is 0.
func TestIDNeverZero(t *testing.T) {
	g, err := NewGroupIDGen(0, idEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if id := g.Next(); id != 1 {
		t.Fatalf("first id at the epoch got %d; want 1", id)
	}
}

// TestIDUniqueAcrossRestarts runs chains of generators per owner, each
// started when the previous one stopped (a restart, even within the same
// microsecond) and each issuing as many ids as
// the rate limit allows, all owners side by side. No id may repeat.
func TestIDUniqueAcrossRestarts(t *testing.T) {
	src := rand.New(rand.NewPCG(1, 1))
	seen := make(map[uint64]struct{})
	type maker func(owner int, now int64) (IDGen, error)
	chain := func(make maker, owner int, unit int64) {
		now := nowNs + src.Int64N(1e9)
		for range 200 {
			g, err := make(owner, now)
			if err != nil {
				t.Fatal(err)
			}
			run := src.Int64N(50 * unit) // up to 50 ids' time, often less than one
			if src.IntN(10) == 0 {
				run = src.Int64N(1e6) // a millisecond
			}
			// The most a generator may issue: one id per unit of its run.
			// Half the time as one Reserve, to cover that path too.
			n := run / unit
			if n > 0 && src.IntN(2) == 0 {
				first := g.Reserve(uint64(n))
				for i := range uint64(n) {
					record(t, seen, first+i)
				}
			} else {
				for range n {
					record(t, seen, g.Next())
				}
			}
			now += run // the restart comes at once
		}
	}
	for _, set := range []int{0, 1, 7, MaxSETs - 1} {
		chain(NewGroupIDGen, set, groupUnit)
	}
	for _, set := range []int{0, 1, MaxSETs - 1} {
		chain(NewShakeIDGen, set, shakeUnit)
	}
	t.Logf("%d distinct ids", len(seen))
}

func record(t *testing.T, seen map[uint64]struct{}, id uint64) {
	t.Helper()
	if id == 0 {
		t.Fatal("id 0 issued")
	}
	if _, dup := seen[id]; dup {
		t.Fatalf("id %#x issued twice", id)
	}
	seen[id] = struct{}{}
}

func TestIDGenErrors(t *testing.T) {
	f := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := NewGroupIDGen(-1, nowNs)
	f("set -1", err)
	_, err = NewGroupIDGen(MaxSETs, nowNs)
	f("set MaxSETs", err)
	_, err = NewShakeIDGen(-1, nowNs)
	f("shake set -1", err)
	_, err = NewShakeIDGen(MaxSETs, nowNs)
	f("shake set MaxSETs", err)
	_, err = NewGroupIDGen(0, idEpoch-1)
	f("group clock before the epoch", err)
	_, err = NewShakeIDGen(0, 0)
	f("shake clock at 1970", err)
	_, err = NewGroupIDGen(0, idEpoch+(1<<groupSeqBits-1)*groupUnit)
	f("group clock at the end", err)
	_, err = NewShakeIDGen(0, idEpoch+(1<<shakeSeqBits-1)*shakeUnit)
	f("shake clock at the end", err)
}

func TestIDGenExhaustion(t *testing.T) {
	mustPanic := func(name string, fn func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		fn()
	}
	g, err := NewGroupIDGen(5, idEpoch+(1<<groupSeqBits-3)*groupUnit)
	if err != nil {
		t.Fatal(err)
	}
	if id := g.Next(); OwnerSET(id) != 5 || id&(1<<groupSeqBits-1) != 1<<groupSeqBits-2 {
		t.Fatalf("got %#x; want SET 5, sequence 2^51-2", id)
	}
	mustPanic("Reserve past the end", func() { g.Reserve(2) })
	if id := g.Next(); OwnerSET(id) != 5 {
		t.Fatalf("last id %#x has OwnerSET %d; want 5", id, OwnerSET(id))
	}
	mustPanic("Next past the end", func() { g.Next() })
	// The last SET's shake space ends at 2^64, where next wraps to 0.
	s, err := NewShakeIDGen(MaxSETs-1, idEpoch+(1<<shakeSeqBits-3)*shakeUnit)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := s.Next(), s.Next(); b != 1<<64-1 || a != b-1 {
		t.Fatalf("last SET's last shake ids got %#x, %#x; want 2^64-2, 2^64-1", a, b)
	}
	mustPanic("Next past the last SET's shake end", func() { s.Next() })
	mustPanic("zero IDGen", func() { new(IDGen).Next() })
	mustPanic("Reserve(0)", func() { g, _ := NewGroupIDGen(0, nowNs); g.Reserve(0) })
}

func TestIDGenAllocs(t *testing.T) {
	g, _ := NewShakeIDGen(0, nowNs)
	if a := testing.AllocsPerRun(1000, func() { g.Next() }); a != 0 {
		t.Fatalf("got %v allocs an id; want 0", a)
	}
}

// TestIDGenAfter: ids issued before a restart are never issued again, even
// when the restart's clock is behind them; another owner's ids change
// nothing.
func TestIDGenAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	before, _ := NewGroupIDGen(3, now)
	var last uint64
	for range 1000 {
		last = before.Next()
	}
	restarted, _ := NewGroupIDGen(3, now-int64(time.Second)) // the clock went back
	other, _ := NewGroupIDGen(4, now)
	restarted.After(other.Next())
	restarted.After(last - 10) // replay order: the last id may come before others
	restarted.After(last)
	restarted.After(last - 5)
	if id := restarted.Next(); id != last+1 {
		t.Fatalf("after a restart the next id is %#x; want %#x, one past the last issued", id, last+1)
	}
}
