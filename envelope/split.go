package envelope

import "math/bits"

// Rand is a splitmix64 generator: 8 bytes of state, no allocation, about a
// nanosecond a draw. It is not cryptographic; envelope amounts need to be
// fair, not secret.
//
// A Rand is owned by one goroutine (one per stage) and is not safe for
// concurrent use. The zero value is a valid generator seeded with 0.
type Rand struct {
	s uint64
}

// NewRand returns a Rand seeded with seed. Stages seed from the clock or
// crypto/rand at start-up; tests seed with constants to stay reproducible.
func NewRand(seed uint64) Rand {
	return Rand{s: seed}
}

// Uint64 returns a uniformly distributed 64-bit value.
func (r *Rand) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15 // 2^64/φ: an odd Weyl increment, so the state has period 2^64
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Uint64n returns a uniformly distributed value in [0, n). It panics if n is 0.
//
// Lemire's multiply-shift: the high word of x·n is uniform once the few low
// words below 2^64 mod n are rejected, so there is no modulo bias and, for
// the small n of envelope amounts, almost never a second draw or a division.
func (r *Rand) Uint64n(n uint64) uint64 {
	if n == 0 {
		panic("BUG: envelope: Uint64n(0)")
	}
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n // 2^64 mod n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// DrawShare draws the next share of a group envelope with remaining fen left
// over sharesLeft shares, by the double-mean rule: the last share takes the
// rest, any other is uniform in [1, 2·remaining/sharesLeft − 1] (integer
// division). The caller subtracts the share and decrements sharesLeft.
//
// It requires 1 ≤ sharesLeft ≤ remaining (SEND's n ≤ total); then every
// share is ≥ 1, every later share can still get 1 fen (2r/k − 1 ≤ r − k + 1
// for r ≥ k ≥ 2), and the shares add up to the total exactly. A broken
// precondition panics. DrawShare does not allocate.
func DrawShare(rnd *Rand, remaining uint64, sharesLeft uint32) uint64 {
	lo, hi := ShareRange(remaining, sharesLeft)
	if sharesLeft == 1 {
		return lo
	}
	return lo + rnd.Uint64n(hi-lo+1)
}

// ShareRange is the range [lo, hi] of the next share DrawShare draws with
// remaining fen and sharesLeft shares left: the rest for the last share;
// [1, ⌊2r/k⌋ − 1] otherwise. A replay checks a journalled share against it.
func ShareRange(remaining uint64, sharesLeft uint32) (lo, hi uint64) {
	k := uint64(sharesLeft)
	if k == 0 || remaining < k {
		panic("BUG: envelope: DrawShare needs 1 <= sharesLeft <= remaining")
	}
	if k == 1 {
		return remaining, remaining
	}
	// ⌊2r/k⌋ without computing 2r, which overflows for r ≥ 2^63.
	// r ≥ k makes it ≥ 2, so the upper bound is ≥ 1.
	twoMean := 2*(remaining/k) + 2*(remaining%k)/k
	return 1, twoMean - 1
}
