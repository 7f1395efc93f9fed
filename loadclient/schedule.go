package loadclient

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// MaxQPS is the highest total rate a Schedule accepts: at 1e9 sends a second consecutive
// sends are 1 ns apart, the resolution of the clock the schedule is expressed in. It also
// keeps every global index below 2^64 until the year 2262, where int64 Unix ns run out.
const MaxQPS = 1_000_000_000

const nsPerSec = 1_000_000_000

// maxAtNs is the latest time SetRate accepts, so rounding up to a whole second cannot
// overflow int64.
const maxAtNs = math.MaxInt64 - nsPerSec

// Schedule generates one load-client process's share of a global send schedule: N users
// (ids 1..N) together send exactly the total rate in every whole second of the shared wall
// clock, evenly spaced, and processes that own disjoint user ranges reach this without
// talking to each other, from N, their own range, the rate changes and the clock alone.
//
// The global schedule numbers sends g = 0, 1, 2, …. Under a rate Q that starts at the
// whole second T with index G, send g goes out at T + ⌊(g−G)·1e9/Q⌋ ns, so consecutive
// sends are 1e9/Q ns apart (±1 ns of rounding) and every whole second from T on holds
// exactly Q of them. Send g belongs to cycle position p = g mod N, and positions map to
// users by the bijection p = a·(u−1) mod N (see chooseMultiplier): over any N consecutive
// sends every user sends once, a user sends ⌈Q/N⌉ or ⌊Q/N⌋ times in any whole second, and
// any range of consecutive ids is scattered evenly over the cycle, so a process holding
// users 1..250,000 of 1,000,000 sends a steady quarter of the load, not a burst.
//
// The index↔time map is piecewise linear. A rate change takes effect at the first whole
// second (counted from the Unix epoch) at or after the time it is given for, so processes
// told within the same second agree; the index at that boundary is the old segment's
// first index due at or after it, so indices run on without a gap or a repeat and the
// users' turns continue across the change. The first non-zero rate has no history and is
// extrapolated back to the Unix epoch (G = Q·T/1e9): processes started at different
// times with the same constant rate agree without being told a common start. After that
// the schedule depends on the history of rate changes, so a process that joins later
// must be given the same changes (a plan, see ParsePlan) and call SeekTo(now).
//
// Designs rejected: each user on its own timer with a random phase is not exact per
// second; each process sending its own share Q·M/N at its own even spacing is not exact
// when the share is fractional, and its processes send in step (bursts); ids in order
// (p = u−1) would put a process's contiguous range in one stretch of the cycle, a burst;
// a rate change taking effect at the moment a process is told would differ between
// processes by the skew of their messages.
//
// A Schedule is not safe for concurrent use: one goroutine owns it. The zero value is not
// usable; call NewSchedule.
type Schedule struct {
	perm weyl

	// pos holds the cycle positions of the local users, ascending; 4 bytes per user.
	pos []uint32

	// segs is the index↔time map: segs[k] applies to indices in [segs[k].g0,
	// segs[k+1].g0). Starts are whole seconds and strictly increase, segs[0].qps > 0 when
	// segs is not empty, and segs[k+1].g0 == segs[k].indexAt(segs[k+1].start). One per
	// rate change, all kept: a run has few, and SetRate and SeekTo may reach into the past.
	segs []segment

	// The cursor: the next local send is global index cycle·N + pos[i], in segment seg
	// (segs[seg].g0 ≤ that index). Next only moves it forward; SetRate and SeekTo move it
	// by binary search.
	cycle uint64
	i     int
	seg   int
}

// segment is one constant-rate piece of the index↔time map: index g ≥ g0 is sent at
// start + ⌊(g−g0)·1e9/qps⌋. A segment with qps 0 is a pause and owns no index.
type segment struct {
	start int64 // Unix ns, a whole second
	g0    uint64
	qps   uint64
}

// timeOf returns when index g ≥ sg.g0 is sent; sg.qps must not be 0.
func (sg *segment) timeOf(g uint64) int64 {
	// (g−g0)·1e9 overflows 64 bits after 18e9/qps seconds (5 hours at 1e6 QPS): 128 bits.
	hi, lo := bits.Mul64(g-sg.g0, nsPerSec)
	if hi >= sg.qps {
		return math.MaxInt64 // beyond 2^64 ns after start: later than int64 time
	}
	d, _ := bits.Div64(hi, lo, sg.qps)
	if d > uint64(math.MaxInt64-sg.start) {
		return math.MaxInt64
	}
	return sg.start + int64(d)
}

// indexAt returns the first index sent at or after t ≥ sg.start: ⌈(t−start)·qps/1e9⌉
// after g0, the ceiling matching timeOf's floor.
func (sg *segment) indexAt(t int64) uint64 {
	// (t−start) < 2^63 and qps ≤ 1e9 < 2^30, so hi < 1e9 and Div64 cannot panic.
	hi, lo := bits.Mul64(uint64(t-sg.start), sg.qps)
	d, r := bits.Div64(hi, lo, nsPerSec)
	if r != 0 {
		d++
	}
	return sg.g0 + d
}

// NewSchedule returns the schedule of the process that owns users first..last of users
// 1..n. It is paused until the first SetRate. It takes O(M log M) time for M = last−first+1
// local users and 4·M bytes.
func NewSchedule(n, first, last uint32) (*Schedule, error) {
	if n == 0 {
		return nil, fmt.Errorf("cannot build schedule: user count n=0; want at least 1")
	}
	if first < 1 || first > last || last > n {
		return nil, fmt.Errorf("cannot build schedule: user range [%d,%d]; want 1 ≤ first ≤ last ≤ n=%d", first, last, n)
	}
	return newSchedule(newWeyl(uint64(n)), first, last), nil
}

// newSchedule builds a schedule over the permutation perm; tests pass their own.
func newSchedule(perm weyl, first, last uint32) *Schedule {
	s := &Schedule{perm: perm}
	s.pos = make([]uint32, last-first+1)
	p := s.perm.position(first)
	for k := range s.pos {
		s.pos[k] = uint32(p)
		if p += s.perm.a; p >= s.perm.n {
			p -= s.perm.n
		}
	}
	slices.Sort(s.pos)
	return s
}

// Next returns the next send of this process: the user and the Unix time in ns it is
// due, strictly later than the one before (unless SetRate or SeekTo moved the cursor
// back). ok is false when no send is scheduled: no rate was set yet, or the last change
// set a rate of 0; call Next again after a later SetRate. Amortised O(1), no allocation.
func (s *Schedule) Next() (user uint32, atNs int64, ok bool) {
	if len(s.segs) == 0 {
		return 0, 0, false
	}
	p := uint64(s.pos[s.i])
	g := s.cycle*s.perm.n + p
	for s.seg+1 < len(s.segs) && g >= s.segs[s.seg+1].g0 {
		s.seg++
	}
	sg := &s.segs[s.seg]
	if sg.qps == 0 {
		// A pause followed by a rate shares its g0 with it, so only a final pause gets here.
		return 0, 0, false
	}
	if s.i++; s.i == len(s.pos) {
		s.i = 0
		s.cycle++
	}
	return s.perm.user(p), sg.timeOf(g), true
}

// SetRate sets the total rate of all processes to qps sends a second from the first whole
// second at or after atNs, and returns that second as Unix ns. A qps of 0 pauses. Changes
// already set for that second or later are dropped, so SetRate overrides the rest of a
// plan.
//
// Sends that Next returned due before the boundary stand. Those due at or after it are
// void: the cursor moves back so that Next returns them again at their new times, and a
// caller holding one (the send it waits for) must drop it. atNs should not be earlier
// than sends already made; if it may be, call SeekTo(now) afterwards so that the sends
// of the new rate already past are skipped, not made in a burst.
func (s *Schedule) SetRate(qps uint32, atNs int64) (boundaryNs int64, err error) {
	if qps > MaxQPS {
		return 0, fmt.Errorf("cannot set rate qps=%d: above MaxQPS=%d", qps, MaxQPS)
	}
	if atNs < 0 || atNs > maxAtNs {
		return 0, fmt.Errorf("cannot set rate at atNs=%d: want a Unix time in ns in [0, %d]", atNs, int64(maxAtNs))
	}
	b := (atNs + nsPerSec - 1) / nsPerSec * nsPerSec
	k := sort.Search(len(s.segs), func(k int) bool { return s.segs[k].start >= b })
	s.segs = s.segs[:k]
	if k == 0 {
		// No history before b: a pause changes nothing, a rate starts from the epoch.
		if qps == 0 {
			return b, nil
		}
		g0 := uint64(b/nsPerSec) * uint64(qps)
		s.segs = append(s.segs, segment{start: b, g0: g0, qps: uint64(qps)})
		s.seekIndex(g0)
		return b, nil
	}
	prev := &s.segs[k-1]
	gb := prev.indexAt(b)
	if prev.qps != uint64(qps) { // the same rate again needs no segment: the times agree
		s.segs = append(s.segs, segment{start: b, g0: gb, qps: uint64(qps)})
	}
	if s.nextIndex() > gb {
		s.seekIndex(gb)
	} else if s.seg >= len(s.segs) {
		s.seg = len(s.segs) - 1
	}
	return b, nil
}

// SeekTo moves the cursor, forwards or backwards, so that Next returns the first send of
// this process due at or after atNs; before the first rate it does nothing. A process
// that joins a running plan, or has fallen too far behind, seeks to the present.
func (s *Schedule) SeekTo(atNs int64) {
	if len(s.segs) == 0 {
		return
	}
	k := sort.Search(len(s.segs), func(k int) bool { return s.segs[k].start > atNs })
	if k == 0 {
		s.seekIndex(s.segs[0].g0)
		return
	}
	s.seekIndex(s.segs[k-1].indexAt(atNs))
}

// nextIndex returns the global index of the cursor.
func (s *Schedule) nextIndex() uint64 {
	return s.cycle*s.perm.n + uint64(s.pos[s.i])
}

// seekIndex moves the cursor to the first local index ≥ g and finds its segment:
// O(log M + log segments).
func (s *Schedule) seekIndex(g uint64) {
	s.cycle = g / s.perm.n
	s.i, _ = slices.BinarySearch(s.pos, uint32(g%s.perm.n))
	if s.i == len(s.pos) {
		s.i = 0
		s.cycle++
	}
	next := s.nextIndex()
	// The last segment whose g0 ≤ next: past any pause that shares its g0 with a rate.
	s.seg = sort.Search(len(s.segs), func(k int) bool { return s.segs[k].g0 > next }) - 1
	if s.seg < 0 {
		panic("BUG: schedule cursor before the first segment")
	}
}

// weyl is the bijection between user ids 1..n and cycle positions 0..n−1:
// p = a·(u−1) mod n and u−1 = inv·p mod n, with gcd(a, n) = 1. As n < 2^32 the products
// fit in 64 bits.
type weyl struct {
	n, a, inv uint64
}

func newWeyl(n uint64) weyl {
	a := chooseMultiplier(n)
	return weyl{n: n, a: a, inv: modInverse(a, n)}
}

func (w weyl) position(u uint32) uint64 { return w.a * uint64(u-1) % w.n }

func (w weyl) user(p uint64) uint32 { return uint32(w.inv*p%w.n) + 1 }

// goldenFrac is ⌊2^64/φ⌋, so ⌊n·goldenFrac / 2^64⌋ = ⌊n/φ⌋ in integer arithmetic: every
// process derives the same multiplier from n without floating point to reason about.
const goldenFrac = 0x9E3779B97F4A7C15

// multiplierRadius is how far from n/φ chooseMultiplier looks: wide enough to find a
// multiplier with partial quotients ≤ 5 for every n below 200,000 and for 20,000 random n
// below 2^32 (tried once offline; the tests keep a sample), small enough to cost under a
// millisecond.
const multiplierRadius = 1024

// chooseMultiplier returns the multiplier a of the user permutation for n users: the a
// coprime with n, within multiplierRadius of n/φ, whose a/n has the smallest largest
// continued-fraction partial quotient, the nearest to n/φ on a tie. Every process computes
// the same a from n alone.
//
// Why: the positions of ids k, k+1, …, k+M−1 are k·a + {0, a, 2a, …} mod n, and by the
// three-distance theorem how evenly M such points cover the cycle is governed by the
// partial quotients of a/n; the golden ratio, all 1s, is the ideal. But ⌊n/φ⌋ itself can
// have a large partial quotient deep in its expansion: for n = 1,000,000, a = 618,033 has
// one of 129, and then a process owning a quarter of the users strays about 27 sends
// from its share of 7,500 in some window of 30,000 positions (one second at 30,000 QPS),
// where a = 618,073 (quotients ≤ 3) strays about 3.
func chooseMultiplier(n uint64) uint64 {
	if n <= 2 {
		return n - 1 // n = 1: the only position is 0; n = 2: a = 1
	}
	center, _ := bits.Mul64(n, goldenFrac)
	best, bestQ := uint64(0), uint64(math.MaxUint64)
	for d := uint64(0); d <= multiplierRadius; d++ {
		for _, a := range [2]uint64{center + d, center - d} { // center−d may wrap: a ≥ n
			if a == 0 || a >= n || gcd(a, n) != 1 {
				continue
			}
			if q := maxPartialQuotient(a, n, bestQ); q < bestQ {
				best, bestQ = a, q
			}
		}
	}
	if best == 0 {
		panic(fmt.Sprintf("BUG: no multiplier coprime with n=%d near n/φ", n))
	}
	return best
}

// maxPartialQuotient returns the largest partial quotient of the continued fraction of
// a/n (0 < a < n), or a value ≥ limit as soon as one reaches limit.
func maxPartialQuotient(a, n, limit uint64) uint64 {
	var m uint64
	for x, y := n, a; y != 0; x, y = y, x%y {
		if q := x / y; q > m {
			if m = q; m >= limit {
				return m
			}
		}
	}
	return m
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// modInverse returns x in [0, n) with a·x ≡ 1 (mod n), for gcd(a, n) = 1 and n < 2^32
// (n = 1: 0).
func modInverse(a, n uint64) uint64 {
	if n == 1 {
		return 0
	}
	// Extended Euclid; the coefficients stay below n in absolute value.
	r0, r1 := int64(n), int64(a)
	t0, t1 := int64(0), int64(1)
	for r1 != 0 {
		q := r0 / r1
		r0, r1 = r1, r0-q*r1
		t0, t1 = t1, t0-q*t1
	}
	if r0 != 1 {
		panic(fmt.Sprintf("BUG: multiplier %d not coprime with n=%d", a, n))
	}
	if t0 < 0 {
		t0 += int64(n)
	}
	return uint64(t0)
}
