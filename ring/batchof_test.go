package ring_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/ring"
)

// TestBatchOf: a batch built outside a Ring indexes its slots by sequence
// modulo their power-of-two length, and one that does not fit panics.
func TestBatchOf(t *testing.T) {
	slots := make([]int, 8)
	b := ring.BatchOf(slots, 6, 9) // wraps: slots 6, 7, 0, 1
	if b.Lo != 6 || b.Hi != 9 || b.Len() != 4 {
		t.Fatalf("batch [%d, %d] of %d; want [6, 9] of 4", b.Lo, b.Hi, b.Len())
	}
	*b.At(9) = 42
	if slots[1] != 42 {
		t.Errorf("At(9) is not slot 1")
	}
	for _, c := range []struct {
		n      int
		lo, hi int64
	}{{0, 0, 0}, {6, 0, 1}, {8, 0, 8}, {8, 3, 2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("BatchOf(%d slots, %d, %d) did not panic", c.n, c.lo, c.hi)
				}
			}()
			ring.BatchOf(make([]int, c.n), c.lo, c.hi)
		}()
	}
}
