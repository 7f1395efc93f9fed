package cluster

import (
	"testing"
	"time"
)

// A gateway that announced it was leaving and went unheard is departed for
// an hour; one that went unheard without announcing it is missing; one
// still heard, leaving or not, is neither.
func TestDeparted(t *testing.T) {
	now := time.Now()
	n := &Node{o: Options{Node: 0, Nodes: 5, Lease: time.Second}, peers: map[int]peer{
		1: {Gateway: Gateway{Ready: true, Leaving: true}, seen: now.Add(-10 * time.Minute)}, // drained
		2: {Gateway: Gateway{Ready: true}, seen: now.Add(-10 * time.Minute)},                // died
		3: {Gateway: Gateway{Ready: true, Leaving: true}, seen: now},                        // leaving now, still heard
		4: {Gateway: Gateway{Ready: true, Leaving: true}, seen: now.Add(-2 * time.Hour)},    // drained long ago
	}}
	if got := n.Departed(); got != 1 {
		t.Fatalf("departed %d; want 1 (gateway 1)", got)
	}
}
