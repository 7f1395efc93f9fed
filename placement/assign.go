package placement

import "slices"

// Where SETs fail over (the journal on JetStream), which gateway runs a SET
// is no rule of arithmetic but its last claim in its journal
// (jsjournal.Claims); these functions decide, from every SET's owner of the
// moment and the gateways heard, which SETs a gateway claims, follows and
// hands over. Every gateway with the same view computes the same answer.

// Orphans assigns the SETs that need an owner — none yet, or an owner not in
// live — to the takers (the live gateways that take SETs: not one that is
// leaving), evenly: each in turn, in SET order, to the taker that runs the
// fewest then (ties to the lower node). Every gateway with the same view
// computes the same assignment, so each claims its own and they seldom
// race; when views differ for a moment, the claims' conditional appends
// settle it. It returns the orphans given to node.
func Orphans(owner, live, takers []int, node int) []int {
	if !slices.Contains(takers, node) {
		return nil
	}
	takers = slices.Sorted(slices.Values(takers))
	count := make(map[int]int, len(takers))
	for _, o := range owner {
		if slices.Contains(takers, o) {
			count[o]++
		}
	}
	var mine []int
	for set, o := range owner {
		if slices.Contains(live, o) {
			continue
		}
		best := takers[0]
		for _, n := range takers[1:] {
			if count[n] < count[best] {
				best = n
			}
		}
		count[best]++
		if best == node {
			mine = append(mine, set)
		}
	}
	return mine
}

// Standbys is what node follows while other gateways run it, to take it
// over in milliseconds should its owner die: of each other live owner's
// SETs, those Orphans would give node if that owner alone were gone. The
// SETs a death leaves are then already loaded where they are claimed.
func Standbys(owner, live, takers []int, node int) []int {
	if !slices.Contains(takers, node) {
		return nil
	}
	var out []int
	for _, gone := range live {
		if gone == node || !slices.Contains(owner, gone) {
			continue
		}
		without := func(nodes []int) []int {
			return slices.DeleteFunc(slices.Clone(nodes), func(n int) bool { return n == gone })
		}
		for _, set := range Orphans(owner, without(live), without(takers), node) {
			if owner[set] == gone {
				out = append(out, set)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ToClaim is what node claims, given the SETs it runs: first those whose
// record names node but that it does not run — an earlier process of
// node's claimed them, or a move of them failed, and no other gateway takes
// them while node is live — then, if it is a taker, its share of the
// Orphans.
func ToClaim(owner []int, running []bool, live, takers []int, node int) []int {
	if !slices.Contains(live, node) {
		return nil
	}
	var mine []int
	for set, o := range owner {
		if o == node && !running[set] {
			mine = append(mine, set)
		}
	}
	return append(mine, Orphans(owner, live, takers, node)...)
}

// NextMove is the SET node should hand over next, and to whom, to even out
// the SETs over the takers: every SET of a node that is not a taker (it is
// leaving), else one of node's while it runs more than its share (the SETs
// over the takers, rounded up) and a taker runs fewer than rounded down —
// each time to the taker that runs the fewest (ties to the lower node), its
// highest-numbered SET first. Owners not in takers keep their SETs until
// they hand them over. ok is false when node has nothing to move.
func NextMove(owner, takers []int, node int) (set, to int, ok bool) {
	if len(takers) == 0 {
		return 0, 0, false
	}
	takers = slices.Sorted(slices.Values(takers))
	count := make(map[int]int, len(takers))
	mine := -1
	for s, o := range owner {
		if o >= 0 {
			count[o]++
		}
		if o == node {
			mine = s
		}
	}
	if mine < 0 {
		return 0, 0, false
	}
	to = -1
	for _, n := range takers {
		if n != node && (to < 0 || count[n] < count[to]) {
			to = n
		}
	}
	if to < 0 {
		return 0, 0, false
	}
	if slices.Contains(takers, node) {
		all := 0
		for _, n := range takers {
			all += count[n]
		}
		lo, hi := all/len(takers), (all+len(takers)-1)/len(takers)
		if count[node] <= hi || count[to] >= lo {
			return 0, 0, false
		}
	}
	return mine, to, true
}
