package loadclient

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"
)

// start is a whole second of simulated wall clock: 2026-01-01T00:00:00Z.
const start = int64(1_767_225_600) * nsPerSec

type send struct {
	user uint32
	at   int64
}

// driver runs a Schedule the way the load client does: it holds the next send until its
// time comes, and drops it when a rate change voids it.
type driver struct {
	t       *testing.T
	s       *Schedule
	pending send
	held    bool
	last    int64 // time of the last send made, to check the order
}

func newDriver(t *testing.T, n, first, last uint32) *driver {
	t.Helper()
	s, err := NewSchedule(n, first, last)
	if err != nil {
		t.Fatalf("NewSchedule(%d, %d, %d): %v", n, first, last, err)
	}
	return &driver{t: t, s: s, last: math.MinInt64}
}

// until returns the sends due before endNs; it stops early if the schedule is paused.
func (d *driver) until(endNs int64) []send {
	d.t.Helper()
	var out []send
	for {
		if !d.held {
			u, at, ok := d.s.Next()
			if !ok {
				return out
			}
			d.pending, d.held = send{u, at}, true
		}
		if d.pending.at >= endNs {
			return out
		}
		if d.pending.at < d.last {
			d.t.Fatalf("send at %d after one at %d: not in time order", d.pending.at, d.last)
		}
		d.last = d.pending.at
		out = append(out, d.pending)
		d.held = false
	}
}

func (d *driver) setRate(qps uint32, atNs int64) int64 {
	d.t.Helper()
	b, err := d.s.SetRate(qps, atNs)
	if err != nil {
		d.t.Fatalf("SetRate(%d, %d): %v", qps, atNs, err)
	}
	if d.pending.at >= b {
		d.held = false
	}
	return b
}

// perSecond counts sends in each whole second from start on.
func perSecond(sends []send, seconds int) []int {
	got := make([]int, seconds)
	for _, s := range sends {
		got[(s.at-start)/nsPerSec]++
	}
	return got
}

func checkPerSecond(t *testing.T, sends []send, want []int) {
	t.Helper()
	if got := perSecond(sends, len(want)); !slices.Equal(got, want) {
		t.Fatalf("sends per second %v; want %v", got, want)
	}
}

func repeat(qps, seconds int) []int {
	return slices.Repeat([]int{qps}, seconds)
}

func sortSends(sends []send) {
	slices.SortFunc(sends, func(a, b send) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.user, b.user))
	})
}

// checkFair checks each user's sends: at most ⌈q/n⌉ in any whole second, and over the
// whole run counts that differ by at most one between users (sends cover consecutive
// indices, so each user's turn comes once per cycle).
func checkFair(t *testing.T, sends []send, n, q uint32) {
	t.Helper()
	limit := (q + n - 1) / n
	inSecond := map[[2]int64]uint32{}
	total := make([]int, n+1)
	for _, s := range sends {
		key := [2]int64{int64(s.user), (s.at - start) / nsPerSec}
		if inSecond[key]++; inSecond[key] > limit {
			t.Fatalf("user %d sends %d times in second %d; want at most ⌈%d/%d⌉ = %d", s.user, inSecond[key], key[1], q, n, limit)
		}
		total[s.user]++
	}
	lo, hi := slices.Min(total[1:]), slices.Max(total[1:])
	if hi-lo > 1 {
		t.Fatalf("users send between %d and %d times in %d sends of %d users; want a spread of at most 1", lo, hi, len(sends), n)
	}
}

func TestScheduleExactPerSecond(t *testing.T) {
	f := func(n, q uint32, seconds int) {
		t.Helper()
		t.Run(fmt.Sprintf("N=%d/Q=%d", n, q), func(t *testing.T) {
			d := newDriver(t, n, 1, n)
			d.setRate(q, start)
			sends := d.until(start + int64(seconds)*nsPerSec)
			checkPerSecond(t, sends, repeat(int(q), seconds))
			if sends[0].at != start {
				t.Fatalf("first send at start%+d ns; want at start", sends[0].at-start)
			}
			checkFair(t, sends, n, q)
		})
	}
	f(1000, 300, 5)         // Q divides N·seconds: 1.5 cycles
	f(1000, 1000, 3)        // one cycle a second
	f(1000, 2500, 4)        // Q > N: users send 2 or 3 times a second
	f(1000, 1, 5)           // Q = 1
	f(7, 3, 10)             // neither divides the other
	f(1, 5, 3)              // a single user
	f(1_000_000, 30_000, 3) // the experiment: Q does not divide N
}

func TestScheduleEvenSpread(t *testing.T) {
	f := func(q uint32, count int) {
		t.Helper()
		d := newDriver(t, 1000, 1, 1000)
		d.setRate(q, start)
		lo, hi := int64(nsPerSec/q), int64((nsPerSec+q-1)/q)
		prev := start - lo
		for range count {
			_, at, ok := d.s.Next()
			if !ok {
				t.Fatalf("Q=%d: Next reports no send", q)
			}
			if gap := at - prev; gap < lo || gap > hi {
				t.Fatalf("Q=%d: gap %d ns before the send at start%+d; want 1e9/Q = %d..%d", q, gap, at-start, lo, hi)
			}
			prev = at
		}
	}
	f(1, 3)
	f(7, 20)
	f(300, 1000)
	f(30_000, 100_000)
	f(999_983, 100_000)
	f(MaxQPS, 100_000)
}

// worstShareDeviation returns how far, at most, the sends of one process in a window of
// width ns stray from its share share·q·width/1e9, over the windows of [start, start+span).
func worstShareDeviation(sends []send, q uint32, share float64, width, span int64) float64 {
	counts := make([]int, span/width)
	for _, s := range sends {
		counts[(s.at-start)/width]++
	}
	want := share * float64(q) * float64(width) / nsPerSec
	var worst float64
	for _, c := range counts {
		worst = max(worst, math.Abs(float64(c)-want))
	}
	return worst
}

func TestScheduleProcessesMatchSingle(t *testing.T) {
	// tolerance is how far a process may stray from its share in any 100 ms: a few
	// sends, whatever the size of the process (identity order strays by thousands).
	const tolerance = 5
	f := func(n, q uint32, seconds int, bounds []uint32) {
		t.Helper()
		t.Run(fmt.Sprintf("N=%d/Q=%d", n, q), func(t *testing.T) {
			end := start + int64(seconds)*nsPerSec
			single := newDriver(t, n, 1, n)
			single.setRate(q, start)
			want := single.until(end)

			var merged []send
			first := uint32(1)
			for _, last := range bounds {
				d := newDriver(t, n, first, last)
				d.setRate(q, start)
				sends := d.until(end)
				for _, s := range sends {
					if s.user < first || s.user > last {
						t.Fatalf("process [%d,%d] sends for user %d", first, last, s.user)
					}
				}
				share := float64(last-first+1) / float64(n)
				dev := worstShareDeviation(sends, q, share, nsPerSec/10, end-start)
				t.Logf("process [%d,%d]: at most %.2f sends off its share of %.2f per 100 ms", first, last, dev, share*float64(q)/10)
				if dev > tolerance {
					t.Errorf("process [%d,%d] strays %.2f sends from its share in some 100 ms; want at most %d", first, last, dev, tolerance)
				}
				merged = append(merged, sends...)
				first = last + 1
			}
			sortSends(merged)
			sortSends(want)
			if !slices.Equal(merged, want) {
				t.Fatalf("merged %d sends of the processes differ from the %d of a single process", len(merged), len(want))
			}
			checkPerSecond(t, merged, repeat(int(q), seconds))
		})
	}
	f(1000, 300, 4, []uint32{100, 350, 999, 1000})
	f(1000, 2500, 2, []uint32{1, 500, 501, 1000})
	f(1_000_000, 30_000, 2, []uint32{250_000, 300_000, 999_999, 1_000_000})
}

// TestScheduleSpreadNeedsPermutation shows that the spread check above can fail: with
// users in id order a process holding the first quarter sends its whole share in a
// quarter of each cycle.
func TestScheduleSpreadNeedsPermutation(t *testing.T) {
	const n, q = 1000, 1000
	s := newSchedule(weyl{n: n, a: 1, inv: 1}, 1, 250)
	d := &driver{t: t, s: s, last: math.MinInt64}
	d.setRate(q, start)
	sends := d.until(start + nsPerSec)
	if dev := worstShareDeviation(sends, q, 0.25, nsPerSec/10, nsPerSec); dev < 50 {
		t.Fatalf("users in id order stray %.2f sends from their share; want a burst (≥ 50)", dev)
	}
}

func TestScheduleRateChangeAtNextSecond(t *testing.T) {
	const n = 1000
	end := start + 6*nsPerSec
	a, b := newDriver(t, n, 1, 400), newDriver(t, n, 401, n)
	a.setRate(300, start)
	b.setRate(300, start)

	// The two processes hear of the change at different times within the same second.
	sends := a.until(start + 2_300_000_000)
	ba := a.setRate(500, start+2_300_000_000)
	sends = append(sends, b.until(start+2_999_999_999)...)
	bb := b.setRate(500, start+2_999_999_999)
	if ba != start+3*nsPerSec || bb != ba {
		t.Fatalf("boundaries start%+d and start%+d; want both start+3s", ba-start, bb-start)
	}
	sends = append(sends, a.until(end)...)
	sends = append(sends, b.until(end)...)
	sortSends(sends)
	checkPerSecond(t, sends, []int{300, 300, 300, 500, 500, 500})

	single := newDriver(t, n, 1, n)
	single.setRate(300, start)
	single.setRate(500, start+3*nsPerSec)
	want := single.until(end)
	if !slices.Equal(sends, want) {
		t.Fatalf("two processes told at different times differ from one told in advance")
	}
	// Turns continue across the change: 2,400 consecutive sends, each user 2 or 3.
	checkFair(t, sends, n, 500)
}

func TestScheduleRateChangeVoidsPendingSend(t *testing.T) {
	d := newDriver(t, 10, 1, 10)
	d.setRate(1, start)
	got := d.until(start + 500_000_000) // holds the send due at start+1s
	if len(got) != 1 || !d.held || d.pending.at != start+nsPerSec {
		t.Fatalf("sent %v, holding %v; want one send and the next held for start+1s", got, d.pending)
	}
	held := d.pending
	d.setRate(10, start+500_000_000) // from start+1s
	u, at, ok := d.s.Next()
	if !ok || u != held.user || at != held.at {
		t.Fatalf("after SetRate Next = %d, start%+d, %v; want the voided send again: %d, start+1s", u, at-start, ok, held.user)
	}
	d.held = false
	got = append(got, send{u, at})
	got = append(got, d.until(start+3*nsPerSec)...)
	checkPerSecond(t, got, []int{1, 10, 10})
}

func TestSchedulePauseAndResume(t *testing.T) {
	const n = 1000
	d := newDriver(t, n, 1, n)
	d.setRate(300, start)
	sends := d.until(start + 1_500_000_000)
	d.setRate(0, start+1_500_000_000) // pause from start+2s
	sends = append(sends, d.until(start+10*nsPerSec)...)
	if _, _, ok := d.s.Next(); ok {
		t.Fatalf("Next reports a send while paused")
	}
	d.setRate(300, start+3_200_000_000) // resume at start+4s
	sends = append(sends, d.until(start+6*nsPerSec)...)
	checkPerSecond(t, sends, []int{300, 300, 0, 0, 300, 300})
	// Turns continue across the pause: 1,200 consecutive sends.
	checkFair(t, sends, n, 300)
}

func TestScheduleLateStartAgrees(t *testing.T) {
	const n = 1000
	end := start + 4*nsPerSec

	// Constant rate: the second process starts 1.7 s later, told nothing but the rate.
	a, b := newDriver(t, n, 1, 600), newDriver(t, n, 601, n)
	a.setRate(300, start)
	a.until(start + 2*nsPerSec) // only a's share: b has not started
	if got := b.setRate(300, start+1_700_000_000); got != start+2*nsPerSec {
		t.Fatalf("boundary start%+d; want start+2s", got-start)
	}
	sends := append(a.until(end), b.until(end)...)
	sortSends(sends)
	checkPerSecond(t, sends, []int{0, 0, 300, 300})

	// A plan: the late process applies the same plan and seeks to the present.
	plan, err := ParsePlan("300@2s,700@1s,100@5s", start)
	if err != nil {
		t.Fatal(err)
	}
	ref, late := newDriver(t, n, 1, n), newDriver(t, n, 1, n)
	for _, c := range plan {
		ref.setRate(c.QPS, c.AtNs)
		late.setRate(c.QPS, c.AtNs)
	}
	join := start + 2_500_000_000
	late.s.SeekTo(join)
	var want []send
	for _, s := range ref.until(end) {
		if s.at >= join {
			want = append(want, s)
		}
	}
	if got := late.until(end); !slices.Equal(got, want) {
		t.Fatalf("process joining at start+2.5s sends %d; want the %d of one running from the start", len(got), len(want))
	}
}

func TestScheduleSeekTo(t *testing.T) {
	for _, last := range []uint32{1000, 333} {
		d := newDriver(t, 1000, 1, last)
		d.setRate(4000, start)
		want := d.until(start + nsPerSec)
		for _, at := range []int64{start - nsPerSec, start, start + 123_456_789, start + 999_999_999, start + 250_000} {
			d.s.SeekTo(at)
			d.held, d.last = false, math.MinInt64
			got := d.until(start + nsPerSec)
			i, _ := slices.BinarySearchFunc(want, at, func(s send, at int64) int { return cmp.Compare(s.at, at) })
			if !slices.Equal(got, want[i:]) {
				t.Fatalf("users 1-%d, after SeekTo(start%+d): %d sends; want the last %d", last, at-start, len(got), len(want)-i)
			}
		}
	}
}

// TestScheduleLongSegment seeks 30 days into a segment at 1e6 QPS, where (g−g0)·1e9
// overflows 64 bits (after 5 hours).
func TestScheduleLongSegment(t *testing.T) {
	const q = 1_000_000
	d := newDriver(t, 1000, 1, 1000)
	d.setRate(q, start)
	at := start + 30*24*3600*nsPerSec
	d.s.SeekTo(at)
	d.last = at
	sends := d.until(at + nsPerSec)
	if len(sends) != q || sends[0].at != at {
		t.Fatalf("second 30 days in: %d sends, first at %+d ns; want %d, the first at 0", len(sends), sends[0].at-at, q)
	}
	for i := 1; i < len(sends); i++ {
		if gap := sends[i].at - sends[i-1].at; gap != 1000 {
			t.Fatalf("gap %d ns at send %d; want 1000", gap, i)
		}
	}
}

func TestScheduleMultiplier(t *testing.T) {
	f := func(n uint64) {
		t.Helper()
		w := newWeyl(n)
		if n > 1 && (w.a == 0 || w.a >= n || gcd(w.a, n) != 1 || w.a*w.inv%n != 1) {
			t.Fatalf("n=%d: a=%d inv=%d; want a coprime with n and a·inv ≡ 1", n, w.a, w.inv)
		}
		if q := maxPartialQuotient(w.a, n, math.MaxUint64); q > 5 {
			t.Fatalf("n=%d: a=%d has a partial quotient %d; want at most 5", n, w.a, q)
		}
		if n <= 2000 {
			seen := make([]bool, n)
			for u := uint32(1); uint64(u) <= n; u++ {
				p := w.position(u)
				if seen[p] || w.user(p) != u {
					t.Fatalf("n=%d: user %d ↦ position %d ↦ user %d (seen before: %v)", n, u, p, w.user(p), seen[p])
				}
				seen[p] = true
			}
		}
	}
	for n := uint64(1); n <= 400; n++ {
		f(n)
	}
	for _, n := range []uint64{1000, 2000, 720_720, 1_000_000, 1 << 20, 3_000_000, 4_294_967_291, math.MaxUint32} {
		f(n)
	}
	// n = 1,000,000: n/φ rounded is a poor multiplier; the chosen one is not.
	if q := maxPartialQuotient(618_033, 1_000_000, math.MaxUint64); q < 100 {
		t.Fatalf("618033/1e6 has partial quotients up to %d; this test expects one ≥ 100", q)
	}
}

func TestScheduleNextAllocs(t *testing.T) {
	d := newDriver(t, 1000, 1, 1000)
	d.setRate(30_000, start)
	if allocs := testing.AllocsPerRun(1000, func() { d.s.Next() }); allocs != 0 {
		t.Fatalf("Next allocates %v times; want 0", allocs)
	}
}

func TestScheduleErrors(t *testing.T) {
	f := func(n, first, last uint32, want string) {
		t.Helper()
		_, err := NewSchedule(n, first, last)
		if err == nil || err.Error() != want {
			t.Fatalf("NewSchedule(%d, %d, %d) error %v; want %q", n, first, last, err, want)
		}
	}
	f(0, 1, 1, "cannot build schedule: user count n=0; want at least 1")
	f(10, 0, 5, "cannot build schedule: user range [0,5]; want 1 ≤ first ≤ last ≤ n=10")
	f(10, 6, 5, "cannot build schedule: user range [6,5]; want 1 ≤ first ≤ last ≤ n=10")
	f(10, 1, 11, "cannot build schedule: user range [1,11]; want 1 ≤ first ≤ last ≤ n=10")

	s, err := NewSchedule(10, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Next(); ok {
		t.Fatalf("Next reports a send before any rate")
	}
	g := func(qps uint32, at int64, want string) {
		t.Helper()
		if _, err := s.SetRate(qps, at); err == nil || err.Error() != want {
			t.Fatalf("SetRate(%d, %d) error %v; want %q", qps, at, err, want)
		}
	}
	g(MaxQPS+1, start, "cannot set rate qps=1000000001: above MaxQPS=1000000000")
	g(1, -1, "cannot set rate at atNs=-1: want a Unix time in ns in [0, 9223372035854775807]")
	g(1, math.MaxInt64, "cannot set rate at atNs=9223372036854775807: want a Unix time in ns in [0, 9223372035854775807]")
}
