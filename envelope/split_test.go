package envelope

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// twoMeanMinus1 is the double-mean upper bound ⌊2r/k⌋ − 1 computed in 128
// bits, independently of DrawShare's overflow-free formula.
func twoMeanMinus1(r, k uint64) uint64 {
	q, _ := bits.Div64(r>>63, r<<1, k)
	return max(q, 2) - 1
}

// splitAll splits total into k shares and checks every share as it is drawn.
func splitAll(t *testing.T, rnd *Rand, total uint64, k uint32) {
	t.Helper()
	var sum uint64
	r := total
	for left := k; left > 0; left-- {
		s := DrawShare(rnd, r, left)
		if s < 1 {
			t.Fatalf("total=%d k=%d: share %d at r=%d left=%d is 0", total, k, k-left, r, left)
		}
		if left > 1 {
			if hi := twoMeanMinus1(r, uint64(left)); s > hi {
				t.Fatalf("total=%d k=%d: share %d at r=%d left=%d: got %d; want ≤ %d", total, k, k-left, r, left, s, hi)
			}
		} else if s != r {
			t.Fatalf("total=%d k=%d: last share got %d; want the rest %d", total, k, s, r)
		}
		if sum+s < sum {
			t.Fatalf("total=%d k=%d: sum overflows", total, k)
		}
		sum += s
		r -= s
	}
	if sum != total {
		t.Fatalf("total=%d k=%d: shares sum to %d", total, k, sum)
	}
}

func TestDrawShareProtocolLimits(t *testing.T) {
	rnd := NewRand(1)
	src := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		k := uint32(1 + src.IntN(100))
		total := uint64(k) + src.Uint64N(20000-uint64(k)+1)
		splitAll(t, &rnd, total, k)
	}
	// Corners: every share exactly 1, two shares, the extreme totals.
	for k := uint32(1); k <= 100; k++ {
		splitAll(t, &rnd, uint64(k), k)
		splitAll(t, &rnd, 20000, k)
	}
}

func TestDrawShareLargeTotals(t *testing.T) {
	rnd := NewRand(2)
	src := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		k := uint32(1 + src.IntN(100))
		total := max(uint64(k), src.Uint64()>>src.IntN(64))
		splitAll(t, &rnd, total, k)
	}
	for k := uint32(1); k <= 100; k++ {
		splitAll(t, &rnd, math.MaxUint64, k)
		splitAll(t, &rnd, 1<<63, k)
	}
	splitAll(t, &rnd, math.MaxUint64, 1<<16)
}

// TestDrawShareMean checks that a first share averages total/k: uniform on
// [1, ⌊2r/k⌋−1] has mean ⌊2r/k⌋/2, within ½ of r/k.
func TestDrawShareMean(t *testing.T) {
	const n = 200000
	f := func(total uint64, k uint32) {
		t.Helper()
		rnd := NewRand(total ^ uint64(k))
		var sum float64
		for range n {
			sum += float64(DrawShare(&rnd, total, k))
		}
		mean := sum / n
		hi := float64(twoMeanMinus1(total, uint64(k)))
		sigma := math.Sqrt((hi*hi-1)/12) / math.Sqrt(n)
		want := float64(total) / float64(k)
		if d := math.Abs(mean - want); d > 0.5+6*sigma {
			t.Errorf("total=%d k=%d: first share mean %.3f; want %.3f ± %.3f", total, k, mean, want, 0.5+6*sigma)
		}
	}
	f(20000, 100)
	f(10000, 10)
	f(100, 7)
	f(3, 2)
	f(1_000_000_000_000, 3)
}

// TestDrawShareUniform checks that every value of [1, 2r/k−1] comes up about
// equally often (chi-square, 4 degrees of freedom).
func TestDrawShareUniform(t *testing.T) {
	rnd := NewRand(5)
	var counts [6]int
	const n = 100000
	for range n {
		counts[DrawShare(&rnd, 10, 3)]++ // ⌊20/3⌋−1 = 5
	}
	if counts[0] != 0 {
		t.Fatalf("drew 0 %d times", counts[0])
	}
	chi2 := 0.0
	for _, c := range counts[1:] {
		d := float64(c) - n/5.0
		chi2 += d * d / (n / 5.0)
	}
	if chi2 > 18.47 { // p = 0.001 for 4 degrees of freedom
		t.Errorf("counts %v: chi-square %.1f; want ≤ 18.47", counts[1:], chi2)
	}
}

// TestUint64nUnbiased uses n = 3·2^62, where x mod n would put half the draws
// in the first third.
func TestUint64nUnbiased(t *testing.T) {
	rnd := NewRand(6)
	const n = 3 << 62
	var thirds [3]int
	const draws = 300000
	for range draws {
		v := rnd.Uint64n(n)
		if v >= n {
			t.Fatalf("Uint64n(%d) = %d", uint64(n), v)
		}
		thirds[v>>62]++
	}
	for i, c := range thirds {
		if d := math.Abs(float64(c) - draws/3.0); d > 6*math.Sqrt(draws*2/9.0) {
			t.Errorf("third %d: got %d of %d draws; want about %d", i, c, draws, draws/3)
		}
	}
	for _, n := range []uint64{1, 2, 7, 1000, math.MaxUint64} {
		for range 1000 {
			if v := rnd.Uint64n(n); v >= n {
				t.Fatalf("Uint64n(%d) = %d", n, v)
			}
		}
	}
}

// TestRandZeroValue pins splitmix64: seed 0 starts with the reference
// implementation's first output.
func TestRandZeroValue(t *testing.T) {
	var r Rand
	if got, want := r.Uint64(), uint64(0xe220a8397b1dcdaf); got != want {
		t.Fatalf("got %#x; want %#x", got, want)
	}
}

func TestDrawSharePanics(t *testing.T) {
	f := func(remaining uint64, k uint32) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("DrawShare(%d, %d) did not panic", remaining, k)
			}
		}()
		rnd := NewRand(0)
		DrawShare(&rnd, remaining, k)
	}
	f(10, 0)
	f(2, 3)
	f(0, 1)
}

func TestDrawShareAllocs(t *testing.T) {
	rnd := NewRand(7)
	if a := testing.AllocsPerRun(1000, func() {
		DrawShare(&rnd, 20000, 100)
		rnd.Uint64n(3 << 62)
	}); a != 0 {
		t.Fatalf("got %v allocs a draw; want 0", a)
	}
}

func BenchmarkDrawShare(b *testing.B) {
	b.ReportAllocs()
	rnd := NewRand(8)
	var sink uint64
	for b.Loop() {
		sink += DrawShare(&rnd, 20000, 100)
	}
	_ = sink
}

// BenchmarkUint64n sets Rand beside math/rand/v2's PCG, the stdlib peer.
func BenchmarkUint64n(b *testing.B) {
	b.Run("Rand", func(b *testing.B) {
		b.ReportAllocs()
		rnd := NewRand(9)
		var sink uint64
		for b.Loop() {
			sink += rnd.Uint64n(399)
		}
		_ = sink
	})
	b.Run("PCG", func(b *testing.B) {
		b.ReportAllocs()
		rnd := rand.New(rand.NewPCG(9, 9))
		var sink uint64
		for b.Loop() {
			sink += rnd.Uint64N(399)
		}
		_ = sink
	})
}
