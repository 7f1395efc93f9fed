package ingress

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// chats sends n CHATs at now through r, storing tat as the ingress does
// for the ones let through, and returns how many were.
func chats(r chatRate, tat *int64, now int64, n int) (ok int) {
	for range n {
		if next, allowed := r.take(*tat, now); allowed {
			*tat = next
			ok++
		}
	}
	return ok
}

func TestChatRateBurstAndRefill(t *testing.T) {
	const start = int64(1_700_000_000) * 1e9
	r := newChatRate(10, 5) // a token every 100 ms, 5 at once
	var tat int64           // a new connection's: full
	if got := chats(r, &tat, start, 20); got != 5 {
		t.Fatalf("a full bucket let %d of 20 CHATs at one instant through; want the burst, 5", got)
	}
	if _, ok := r.take(tat, start+99*int64(time.Millisecond)); ok {
		t.Fatalf("a CHAT 99 ms after the burst went through; want none before 100 ms")
	}
	if got := chats(r, &tat, start+100*int64(time.Millisecond), 3); got != 1 {
		t.Fatalf("100 ms after the burst %d CHATs went through; want 1", got)
	}
	if got := chats(r, &tat, start+350*int64(time.Millisecond), 5); got != 2 {
		t.Fatalf("350 ms after the burst %d more went through; want 2 (tokens at 200 and 300 ms)", got)
	}
	// A long gap refills it to the burst, never beyond.
	if got := chats(r, &tat, start+int64(time.Hour), 20); got != 5 {
		t.Fatalf("an hour later %d of 20 went through; want the burst, 5", got)
	}
	// A refused CHAT leaves the bucket as it was: tat stays put.
	before := tat
	if next, ok := r.take(tat, start+int64(time.Hour)); ok || next != before {
		t.Fatalf("over the rate: take = %d, %v; want %d, false", next, ok, before)
	}
}

// TestChatRateMatchesTokens checks the bucket against counting tokens in
// nanoseconds of credit, over random gaps from none to several refills.
func TestChatRateMatchesTokens(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		rate  float64
		burst int
	}{{20, 50}, {1, 1}, {1000, 3}, {0.5, 7}, {1e9, 1}} {
		r := newChatRate(c.rate, c.burst)
		capacity := int64(c.burst) * int64(r.interval) // credit of a full bucket
		credit, last := capacity, int64(1e18)
		var tat int64
		now := last
		for i := range 20_000 {
			now += rng.Int64N(3 * int64(r.interval))
			credit = min(capacity, credit+now-last)
			last = now
			want := credit >= int64(r.interval)
			if want {
				credit -= int64(r.interval)
			}
			next, ok := r.take(tat, now)
			if ok != want {
				t.Fatalf("rate %v burst %d, CHAT %d at +%d ns: take says %v; the tokens say %v", c.rate, c.burst, i, now-1e18, ok, want)
			}
			if ok {
				tat = next
			}
		}
	}
}

func TestChatRateExtremes(t *testing.T) {
	t.Run("no limit", func(t *testing.T) {
		for _, rate := range []float64{0, -1, math.NaN()} {
			r := newChatRate(rate, 5)
			var tat int64
			if got := chats(r, &tat, 1, 1000); got != 1000 || tat != 0 {
				t.Errorf("rate %v: %d of 1000 through, tat %d; want all and the bucket untouched", rate, got, tat)
			}
		}
	})
	t.Run("huge rate", func(t *testing.T) {
		for _, rate := range []float64{1e9, 1e12, math.MaxFloat64, math.Inf(1)} {
			r := newChatRate(rate, 3)
			if r.interval != 1 {
				t.Errorf("rate %v: %d ns a token; want 1, the least", rate, r.interval)
			}
			var tat int64
			if got := chats(r, &tat, 1e18, 10); got != 3 {
				t.Errorf("rate %v: %d of 10 at one instant; want the burst, 3", rate, got)
			}
			if got := chats(r, &tat, 1e18+1, 10); got != 1 {
				t.Errorf("rate %v: %d of 10 a nanosecond later; want 1", rate, got)
			}
		}
	})
	t.Run("tiny rate, huge burst", func(t *testing.T) {
		r := newChatRate(1e-300, math.MaxInt)
		if r.interval != maxChatWindow || r.tolerance != maxChatWindow {
			t.Fatalf("interval %d, tolerance %d; want both held to %d", r.interval, r.tolerance, uint64(maxChatWindow))
		}
		var tat int64
		if got := chats(r, &tat, 1e18, 5); got != 2 {
			t.Fatalf("%d of 5 through; want 2 (the tolerance held to one interval)", got)
		}
	})
	t.Run("huge gaps", func(t *testing.T) {
		r := newChatRate(20, 50)
		for _, gap := range []int64{0, 1, int64(time.Hour), 1 << 62} {
			tat := int64(1)
			chats(r, &tat, 1, 50) // empty
			if got := chats(r, &tat, 1+gap, 100); gap >= int64(time.Hour) && got != 50 || got > 50 {
				t.Errorf("after a gap of %d ns: %d of 100 through; want the burst, 50, at most", gap, got)
			}
		}
	})
	t.Run("the end of int64", func(t *testing.T) {
		// Unix ns run out in 2262: there tat saturates instead of wrapping
		// (which would refuse the user forever, or let all through early).
		for _, r := range []chatRate{newChatRate(20, 50), newChatRate(1e-300, math.MaxInt)} {
			var tat int64
			for _, now := range []int64{math.MaxInt64 - 1e9, math.MaxInt64 - 10, math.MaxInt64} {
				if got := chats(r, &tat, now, 100); got < 1 || tat < now {
					t.Errorf("interval %d at %d: %d through, tat %d; want some through and tat never behind now", r.interval, now, got, tat)
				}
			}
		}
	})
	t.Run("the clock goes back", func(t *testing.T) {
		r := newChatRate(1, 2)
		var tat int64
		now := int64(1e18)
		chats(r, &tat, now, 2) // empty until now + 1 s
		if got := chats(r, &tat, now-int64(time.Hour), 5); got != 2 {
			t.Errorf("an hour back: %d of 5 through; want a full bucket, 2, not a user refused for an hour", got)
		}
		tat = 0
		chats(r, &tat, now, 2)
		if got := chats(r, &tat, now-int64(time.Millisecond), 5); got > 2 {
			t.Errorf("a millisecond back: %d through; want the burst at most", got)
		}
	})
}

// BenchmarkChatRateTake is what the CHAT rate adds to each CHAT's path.
func BenchmarkChatRateTake(b *testing.B) {
	for _, c := range []struct {
		name string
		r    chatRate
	}{{"off", newChatRate(0, 0)}, {"on", newChatRate(20, 50)}} {
		b.Run(c.name, func(b *testing.B) {
			var tat int64
			now := int64(1e18)
			for b.Loop() {
				now += 50e6 // within the rate: every CHAT takes a token
				if next, ok := c.r.take(tat, now); ok {
					tat = next
				}
			}
		})
	}
}
