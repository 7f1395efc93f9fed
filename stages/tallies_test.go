package stages

import (
	"encoding/binary"
	"testing"
)

// TestTalliesPrune: a snapshot folds the tallies of ended campaigns into the
// entry of campaign 0, keeps the running ones, and a load reads both back.
func TestTalliesPrune(t *testing.T) {
	tl := tallies{}
	tl.add(0, 99, 99) // dealt by no campaign: not tallied
	tl.add(5, 10, 100)
	tl.add(6, 20, 200)
	tl.add(7, 30, 300)
	tl.add(5, 1, 1)
	var ended []byte
	for _, id := range []uint32{5, 7, 8, 0} { // 8: none dealt here; 0: never a campaign
		ended = binary.BigEndian.AppendUint32(ended, id)
	}
	tl.prune(ended)
	want := map[uint32]Dealt{0: {41, 401}, 6: {20, 200}}
	check := func(what string, got tallies) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d tallies %v; want %v", what, len(got), got, want)
		}
		for id, d := range want {
			if got[id] == nil || *got[id] != d {
				t.Fatalf("%s: campaign %d: %v; want %v", what, id, got[id], d)
			}
		}
	}
	check("pruned", tl)

	loaded := tallies{}
	r := &reader{b: tl.append(nil)}
	loaded.load(r)
	if err := r.done(); err != nil {
		t.Fatal(err)
	}
	check("loaded", loaded)

	// A later prune adds to the sum; the sum survives another round trip.
	loaded.add(6, 5, 50)
	loaded.prune(binary.BigEndian.AppendUint32(nil, 6))
	want = map[uint32]Dealt{0: {66, 651}}
	check("pruned again", loaded)
	again := tallies{}
	again.load(&reader{b: loaded.append(nil)})
	check("loaded again", again)
}
