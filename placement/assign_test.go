package placement

import (
	"slices"
	"testing"
)

func TestOrphans(t *testing.T) {
	f := func(owner, live []int, node int, want []int) {
		t.Helper()
		if got := Orphans(owner, live, live, node); !slices.Equal(got, want) {
			t.Errorf("Orphans(%v, live %v, node %d) = %v; want %v", owner, live, node, got, want)
		}
	}
	none := []int{-1, -1, -1, -1, -1, -1}
	// A cluster starting: round robin, as -node I/N would spread them.
	f(none, []int{0, 1, 2}, 0, []int{0, 3})
	f(none, []int{2, 0, 1}, 2, []int{2, 5})
	// Gateway 1 died: its SETs go to the survivors, evenly.
	f([]int{0, 1, 2, 0, 1, 2}, []int{0, 2}, 0, []int{1})
	f([]int{0, 1, 2, 0, 1, 2}, []int{0, 2}, 2, []int{4})
	// Survivors of unequal load: the lighter takes more.
	f([]int{0, 0, 0, 1, 1, 2}, []int{0, 2}, 2, []int{3, 4})
	// A gateway that is not live claims nothing.
	f(none, []int{0, 1}, 2, nil)
	// Nothing to claim.
	f([]int{0, 1}, []int{0, 1}, 0, nil)
	// A gateway leaving keeps its SETs and takes no orphan.
	if got := Orphans([]int{0, 1, -1, -1}, []int{0, 1}, []int{1}, 0); got != nil {
		t.Errorf("a leaving gateway's orphans: %v; want none", got)
	}
	if got := Orphans([]int{0, 1, -1, -1}, []int{0, 1}, []int{1}, 1); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("the taker's orphans beside a leaving gateway: %v; want 2, 3", got)
	}
}

// TestStandbys: every SET of a live owner has exactly one standby, another
// taker, and it is the gateway that claims the SET when its owner dies;
// the standbys are spread as evenly as the claims.
func TestStandbys(t *testing.T) {
	for _, tc := range []struct {
		owner, live, takers []int
	}{
		{[]int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, []int{0, 1, 2}, []int{0, 1, 2}},
		{[]int{0, 1, 0, 1, 0, 1}, []int{0, 1}, []int{0, 1}},
		{[]int{0, 0, 0, 1, 2, -1, 3}, []int{0, 1, 2, 3}, []int{0, 1, 2, 3}},
		{[]int{0, 1, 2, 1, 1, 2}, []int{0, 1, 2}, []int{0, 2}}, // 1 leaving: it follows nothing, its SETs are followed
		{[]int{0, 0}, []int{0}, []int{0}},                      // alone: nothing to follow
	} {
		by := map[int][]int{}
		for _, n := range tc.live {
			for _, set := range Standbys(tc.owner, tc.live, tc.takers, n) {
				by[set] = append(by[set], n)
			}
		}
		running := make([]bool, len(tc.owner))
		for set := range running {
			running[set] = tc.owner[set] >= 0
		}
		for set, o := range tc.owner {
			var want []int
			if o >= 0 && slices.Contains(tc.live, o) {
				live := slices.DeleteFunc(slices.Clone(tc.live), func(n int) bool { return n == o })
				takers := slices.DeleteFunc(slices.Clone(tc.takers), func(n int) bool { return n == o })
				for _, n := range takers {
					if slices.Contains(ToClaim(tc.owner, running, live, takers, n), set) {
						want = append(want, n)
					}
				}
			}
			if !slices.Equal(by[set], want) {
				t.Errorf("owners %v, live %v, takers %v: SET %d (of %d) is followed by %v; want %v, who claims it when %d dies",
					tc.owner, tc.live, tc.takers, set, o, by[set], want, o)
			}
		}
	}
	// Three gateways of four SETs each: each follows two of each other's.
	owner := []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}
	for n := range 3 {
		if got := Standbys(owner, []int{0, 1, 2}, []int{0, 1, 2}, n); len(got) != 4 {
			t.Errorf("gateway %d follows %v; want 4 SETs", n, got)
		}
	}
}

// TestNextMove: a gateway that joins gets its even share, one SET at a
// time from those that run more; one that leaves hands every SET over; an
// even cluster moves nothing.
func TestNextMove(t *testing.T) {
	f := func(owner, takers []int, node, wantSet, wantTo int, wantOK bool) {
		t.Helper()
		set, to, ok := NextMove(owner, takers, node)
		if ok != wantOK || ok && (set != wantSet || to != wantTo) {
			t.Errorf("NextMove(%v, takers %v, node %d) = %d → %d, %v; want %d → %d, %v", owner, takers, node, set, to, ok, wantSet, wantTo, wantOK)
		}
	}
	// Gateway 2 joined a cluster of 2 running 6 SETs: each of the others
	// gives one, the highest-numbered first, then it is even.
	six := []int{0, 1, 0, 1, 0, 1}
	f(six, []int{0, 1, 2}, 0, 4, 2, true)
	f(six, []int{0, 1, 2}, 1, 5, 2, true)
	f(six, []int{0, 1, 2}, 2, 0, 0, false)
	f([]int{0, 1, 0, 1, 2, 2}, []int{0, 1, 2}, 0, 0, 0, false)
	// Uneven by one: nothing to gain.
	f([]int{0, 0, 0, 1, 1}, []int{0, 1}, 0, 0, 0, false)
	// Gateway 1 leaves (not a taker): every SET of its goes, to the one that
	// runs the fewest; the others move nothing meanwhile.
	f([]int{0, 1, 2, 1, 1, 2}, []int{0, 2}, 1, 4, 0, true)
	f([]int{0, 0, 0, 1, 1, 2}, []int{0, 2}, 1, 4, 2, true)
	f([]int{0, 1, 2, 1, 1, 2}, []int{0, 2}, 0, 0, 0, false)
	// The last taker gone: nowhere to go.
	f([]int{1, 1}, nil, 1, 0, 0, false)
	f([]int{1, 1}, []int{1}, 1, 0, 0, false)
}

// TestToClaim: a gateway's new process reclaims every SET its records
// name, since no other gateway takes them while it is live, and its share
// of the orphans besides.
func TestToClaim(t *testing.T) {
	f := func(owner []int, running []bool, live []int, node int, want []int) {
		t.Helper()
		if got := ToClaim(owner, running, live, live, node); !slices.Equal(got, want) {
			t.Errorf("ToClaim(%v, running %v, live %v, node %d) = %v; want %v", owner, running, live, node, got, want)
		}
	}
	no := make([]bool, 8)
	// Gateway 0 restarted within the lease, holding records of 6 SETs:
	// it takes all 6, and gateway 1, which runs none, none of them.
	owner := []int{0, 0, 0, 0, 0, 0, 2, 2}
	f(owner, no, []int{0, 1, 2}, 0, []int{0, 1, 2, 3, 4, 5})
	f(owner, no, []int{0, 1, 2}, 1, nil)
	// Its own records and orphans: those first, then its share.
	f([]int{0, -1, 2, 1, 0, -1, 2, 1}, no, []int{0, 1, 2}, 0, []int{0, 4, 1})
	// The SETs it runs are not claimed again.
	f([]int{0, 0, 1, 1}, []bool{true, false, false, false}, []int{0, 1}, 0, []int{1})
	// Not live: nothing.
	f(owner, no, []int{1, 2}, 0, nil)
	// Leaving (live, not a taker): its own records only, no orphan.
	if got := ToClaim([]int{0, -1, 1}, []bool{false, false, true}, []int{0, 1}, []int{1}, 0); !slices.Equal(got, []int{0}) {
		t.Errorf("a leaving gateway claims %v; want its own record only", got)
	}
}
