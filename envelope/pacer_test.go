package envelope

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
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

func TestDealerRotation(t *testing.T) {
	type visit struct {
		set   int
		count uint32
	}
	d, err := NewDealer(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	f := func(n uint64, want ...visit) {
		t.Helper()
		var got []visit
		d.Deal(n, func(set int, count uint32) { got = append(got, visit{set, count}) })
		if len(got) != len(want) {
			t.Fatalf("Deal(%d): got %v; want %v", n, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Deal(%d): got %v; want %v", n, got, want)
			}
		}
	}
	f(1, visit{0, 1})
	f(1, visit{1, 1})
	f(0)
	f(2, visit{2, 1}, visit{0, 1})
	f(8, visit{1, 2}, visit{1, 1}, visit{2, 2}, visit{2, 1}, visit{0, 2}) // 3, 3, 2 from SET 1
	f(3, visit{0, 1}, visit{1, 1}, visit{2, 1})
}

// TestDealerFairRepeatingTicks is the case that rules out rotating whole
// batches: 2 SETs and 65 envelopes a tick.
func TestDealerFairRepeatingTicks(t *testing.T) {
	d, _ := NewDealer(2, 64)
	var per [2]uint64
	for range 1000 {
		d.Deal(65, func(set int, count uint32) { per[set] += uint64(count) })
	}
	if per[0] != 32500 || per[1] != 32500 {
		t.Fatalf("got %v; want 32500 each", per)
	}
}

func TestNewDealerErrors(t *testing.T) {
	f := func(sets int, maxBatch uint32) {
		t.Helper()
		if _, err := NewDealer(sets, maxBatch); err == nil {
			t.Errorf("NewDealer(%d, %d): no error", sets, maxBatch)
		}
	}
	f(0, 64)
	f(-1, 64)
	f(MaxSETs+1, 64)
	f(1, 0)
	if _, err := NewDealer(MaxSETs, 1); err != nil {
		t.Errorf("NewDealer(MaxSETs, 1): %v", err)
	}
}

// TestCampaign runs campaigns on a fake clock the way the producer will:
// ticks at random gaps, Deal(Due(now) − dealt) each tick. At every tick the
// dealt count is exactly Due(now), every event holds 1..maxBatch envelopes,
// per-SET totals differ by at most 1 (envelope-level rotation), and the
// campaign ends with exactly its total.
//
// Whole-second windows: dealing happens only at ticks, so a window [a, a+1s)
// misses what fell due after its last tick and gets what fell due before its
// first: its count is rate ± ⌈rate·gap/1s⌉ for the longest gap. With gaps up
// to TickInterval (10 ms) that is rate ± max(1, ⌈1%⌉); with gaps up to 50 ms
// it is rate ± ⌈5%⌉, so 50 ms ticks cannot keep 1%.
func TestCampaign(t *testing.T) {
	const maxBatch = 64
	rates := []uint64{1, 7, 200, 999, 30_000, 1_000_000}
	setss := []int{1, 3, 7, 64, 100}
	for _, maxGap := range []int64{TickInterval, 50_000_000} {
		for _, rate := range rates {
			for _, sets := range setss {
				src := rand.New(rand.NewPCG(rate, uint64(sets)))
				seconds := uint64(4)
				if rate == 1_000_000 {
					seconds = 2 // keep the race detector quick
				}
				total := rate*seconds + rate/3 + 1 // ends mid-second
				p := NewPacer(startNs, rate, total)
				d, err := NewDealer(sets, maxBatch)
				if err != nil {
					t.Fatal(err)
				}
				per := make([]uint64, sets)
				var dealt uint64
				visit := func(set int, count uint32) {
					if count < 1 || count > maxBatch {
						t.Fatalf("rate=%d sets=%d: event of %d envelopes", rate, sets, count)
					}
					per[set] += uint64(count)
					dealt += uint64(count)
				}
				type tick struct {
					now   int64
					dealt uint64
				}
				ticks := []tick{{startNs, 0}}
				end := p.At(total)
				for now := startNs - src.Int64N(maxGap); dealt < total; {
					now += 1_000_000 + src.Int64N(maxGap-1_000_000+1)
					d.Deal(p.Due(now)-dealt, visit)
					if dealt != p.Due(now) {
						t.Fatalf("rate=%d sets=%d: dealt %d; want Due %d", rate, sets, dealt, p.Due(now))
					}
					lo, hi := per[0], per[0]
					for _, c := range per {
						lo, hi = min(lo, c), max(hi, c)
					}
					if hi-lo > 1 {
						t.Fatalf("rate=%d sets=%d: per-SET totals span %d..%d", rate, sets, lo, hi)
					}
					if now >= startNs {
						ticks = append(ticks, tick{now, dealt})
					}
					if now > end+maxGap {
						t.Fatalf("rate=%d sets=%d: %d of %d dealt after the end", rate, sets, dealt, total)
					}
				}
				var sum uint64
				for _, c := range per {
					sum += c
				}
				if sum != total {
					t.Fatalf("rate=%d sets=%d: per-SET totals add up to %d; want %d", rate, sets, sum, total)
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
				var worst uint64
				check := func(a int64) {
					got := dealtBefore(a+1e9) - dealtBefore(a)
					dev := max(got, rate) - min(got, rate)
					worst = max(worst, dev)
					if dev > slack {
						t.Fatalf("rate=%d sets=%d gap≤%dms: [start%+d, +1s) dealt %d; want %d ± %d",
							rate, sets, maxGap/1e6, a-startNs, got, rate, slack)
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
				if sets == 100 {
					t.Logf("gap ≤ %2d ms rate %7d: worst window off by %d (bound %d)", maxGap/1e6, rate, worst, slack)
				}
			}
		}
	}
}

func TestPacerDealAllocs(t *testing.T) {
	p := NewPacer(startNs, 1_000_000, math.MaxUint64)
	d, _ := NewDealer(64, 64)
	var dealt, events uint64
	now := int64(startNs)
	if a := testing.AllocsPerRun(1000, func() {
		now += TickInterval
		d.Deal(p.Due(now)-dealt, func(set int, count uint32) {
			dealt += uint64(count)
			events++
		})
	}); a != 0 {
		t.Fatalf("got %v allocs a tick; want 0", a)
	}
}

func BenchmarkDeal(b *testing.B) {
	for _, sets := range []int{1, 64, 4096} {
		b.Run("sets="+strconv.Itoa(sets), func(b *testing.B) {
			b.ReportAllocs()
			d, _ := NewDealer(sets, 64)
			var n uint64
			for b.Loop() {
				d.Deal(10_000, func(set int, count uint32) { n += uint64(count) })
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/envelope")
		})
	}
}
