package envelope

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// startNs is an arbitrary campaign start: nothing may assume whole seconds.
const startNs = 1_764_500_000_123_456_789

func TestPacerDueExact(t *testing.T) {
	src := rand.New(rand.NewPCG(1, 1))
	billion := big.NewInt(1e9)
	for range 100000 {
		rate := 1 + src.Uint64N(1_000_000)
		if src.IntN(4) == 0 {
			rate = src.Uint64() >> src.IntN(64) // any rate must work
		}
		total := src.Uint64() >> src.IntN(64)
		elapsed := int64(src.Uint64()>>1) >> src.IntN(63)
		p := NewPacer(startNs, rate, total)
		now := startNs + elapsed
		if now < startNs { // overflowed
			continue
		}
		want := new(big.Int).SetUint64(rate)
		want.Mul(want, big.NewInt(elapsed)).Quo(want, billion)
		if want.Cmp(new(big.Int).SetUint64(total)) > 0 {
			want.SetUint64(total)
		}
		if got := p.Due(now); got != want.Uint64() {
			t.Fatalf("rate=%d total=%d elapsed=%d: got %d; want %s", rate, total, elapsed, got, want)
		}
	}
}

func TestPacerEdges(t *testing.T) {
	f := func(p Pacer, now int64, want uint64) {
		t.Helper()
		if got := p.Due(now); got != want {
			t.Errorf("rate=%d total=%d now=start%+d: got %d; want %d", p.Rate(), p.Total(), now-p.start, got, want)
		}
	}
	p := NewPacer(startNs, 7, 100)
	f(p, startNs-1, 0)
	f(p, startNs, 0)
	f(p, startNs+142_857_142, 0)
	f(p, startNs+142_857_143, 1) // ⌈1e9/7⌉
	f(p, startNs+1e9, 7)
	f(p, math.MaxInt64, 100)
	f(NewPacer(math.MinInt64, math.MaxUint64, math.MaxUint64), math.MaxInt64, math.MaxUint64)
	f(NewPacer(-5, 1e9, 1e6), 5, 10) // start before 0
	f(Pacer{}, math.MaxInt64, 0)
}

// TestPacerWholeSecond: every whole second falls due with exactly rate
// envelopes, whatever its alignment, until the total caps it.
func TestPacerWholeSecond(t *testing.T) {
	src := rand.New(rand.NewPCG(2, 2))
	for range 100000 {
		rate := 1 + src.Uint64N(1_000_000)
		p := NewPacer(startNs, rate, math.MaxUint64)
		now := startNs + src.Int64N(1e15)
		if got := p.Due(now+1e9) - p.Due(now); got != rate {
			t.Fatalf("rate=%d elapsed=%d: a second dealt %d", rate, now-startNs, got)
		}
	}
}

func TestPacerAt(t *testing.T) {
	src := rand.New(rand.NewPCG(3, 3))
	for range 100000 {
		rate := 1 + src.Uint64N(1_000_000)
		total := 1 + src.Uint64N(1e9)
		p := NewPacer(startNs, rate, total)
		n := 1 + src.Uint64N(total)
		at := p.At(n)
		if p.Due(at) < n || p.Due(at-1) >= n {
			t.Fatalf("rate=%d n=%d: At=start+%d, Due there %d and 1 ns before %d", rate, n, at-startNs, p.Due(at), p.Due(at-1))
		}
	}
	p := NewPacer(startNs, 10, 5)
	if got := p.At(0); got != startNs {
		t.Errorf("At(0) got %d; want the start", got)
	}
	if got := p.At(6); got != math.MaxInt64 {
		t.Errorf("At(total+1) got %d; want MaxInt64", got)
	}
	if got := (&Pacer{total: 1}).At(1); got != math.MaxInt64 {
		t.Errorf("rate 0: At(1) got %d; want MaxInt64", got)
	}
	if got := NewPacer(math.MaxInt64-5, 1, 1).At(1); got != math.MaxInt64 {
		t.Errorf("past MaxInt64: At(1) got %d; want MaxInt64", got)
	}
}

// TestCampaign runs campaigns on a fake clock the way a producer does: ticks
// at random gaps, dealing Due(now) − dealt each tick. At every tick the dealt
// count is exactly Due(now), and the campaign ends with exactly its total.
//
// Whole-second windows: dealing happens only at ticks, so a window [a, a+1s)
// misses what fell due after its last tick and gets what fell due before its
// first: its count is rate ± ⌈rate·gap/1s⌉ for the longest gap. With gaps up
// to TickInterval (10 ms) that is rate ± max(1, ⌈1%⌉); with gaps up to 50 ms
// it is rate ± ⌈5%⌉, so 50 ms ticks cannot keep 1%.
func TestCampaign(t *testing.T) {
	for _, maxGap := range []int64{TickInterval, 50_000_000} {
		for _, rate := range []uint64{1, 7, 200, 999, 30_000, 1_000_000} {
			src := rand.New(rand.NewPCG(rate, uint64(maxGap)))
			total := rate*4 + rate/3 + 1 // ends mid-second
			p := NewPacer(startNs, rate, total)
			type tick struct {
				now   int64
				dealt uint64
			}
			ticks := []tick{{startNs, 0}}
			end := p.At(total)
			var dealt uint64
			for now := startNs - src.Int64N(maxGap); dealt < total; {
				now += 1_000_000 + src.Int64N(maxGap-1_000_000+1)
				dealt = p.Due(now)
				if now >= startNs {
					ticks = append(ticks, tick{now, dealt})
				}
				if now > end+maxGap {
					t.Fatalf("rate=%d: %d of %d due after the end", rate, dealt, total)
				}
			}
			if dealt != total {
				t.Fatalf("rate=%d: %d dealt; want %d", rate, dealt, total)
			}
			// dealtBefore returns what was dealt at ticks before t.
			dealtBefore := func(t int64) uint64 {
				var n uint64
				for _, tk := range ticks {
					if tk.now >= t {
						break
					}
					n = tk.dealt
				}
				return n
			}
			slack := (rate*uint64(maxGap) + 1e9 - 1) / 1e9 // ⌈rate·gap/1s⌉
			if maxGap == TickInterval && slack > max(1, (rate+99)/100) {
				t.Fatalf("rate=%d: slack %d exceeds max(1, ⌈1%%⌉)", rate, slack)
			}
			check := func(a int64) {
				got := dealtBefore(a+1e9) - dealtBefore(a)
				if dev := max(got, rate) - min(got, rate); dev > slack {
					t.Fatalf("rate=%d gap≤%dms: [start%+d, +1s) dealt %d; want %d ± %d", rate, maxGap/1e6, a-startNs, got, rate, slack)
				}
			}
			for a := int64(startNs); a+1e9 <= end; a += 1e9 {
				check(a) // whole seconds of the campaign
			}
			for range 20 {
				if a := startNs + src.Int64N(end-startNs-1e9+1); a+1e9 <= end {
					check(a) // and of a wall clock with another phase
				}
			}
		}
	}
}

func TestPacerAllocs(t *testing.T) {
	p := NewPacer(startNs, 1_000_000, math.MaxUint64)
	now := int64(startNs)
	var due uint64
	if a := testing.AllocsPerRun(1000, func() {
		now += TickInterval
		due = p.Due(now)
	}); a != 0 || due == 0 {
		t.Fatalf("got %v allocs a tick; want 0", a)
	}
}
