package ledger_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/ledger"
)

// TestLatencyBuckets walks every whole µs up to past the last bound: the
// buckets are contiguous and in order, each latency is below its bucket's
// bound and not below the previous one, a bound is at most 25 % above the
// latencies of its bucket from 4 µs up, and everything past the last bound
// lands in the last bucket.
func TestLatencyBuckets(t *testing.T) {
	last := ledger.LatencyBuckets - 1
	if got := ledger.LatencyBucketUs(last - 1); got != 1<<22 {
		t.Fatalf("last bound %d µs; want 2^22", got)
	}
	prev := 0
	for us := uint64(0); us < 1<<23; us++ {
		b := ledger.LatencyBucket(us)
		if b != prev && b != prev+1 {
			t.Fatalf("%d µs: bucket %d after %d", us, b, prev)
		}
		prev = b
		if b == last {
			if us < ledger.LatencyBucketUs(last-1) {
				t.Fatalf("%d µs in the last bucket, below its lower bound", us)
			}
			continue
		}
		hi := ledger.LatencyBucketUs(b)
		if us >= hi {
			t.Fatalf("%d µs in bucket %d, bound %d", us, b, hi)
		}
		if b > 0 && us < ledger.LatencyBucketUs(b-1) {
			t.Fatalf("%d µs in bucket %d, below bucket %d's bound %d", us, b, b-1, ledger.LatencyBucketUs(b-1))
		}
		if us >= 4 && 4*hi > 5*us { // hi ≤ 1.25·us
			t.Fatalf("%d µs: bound %d more than 25 %% above", us, hi)
		}
	}
	if prev != last {
		t.Fatalf("2^23 µs in bucket %d; want %d", prev, last)
	}
	if b := ledger.LatencyBucket(^uint64(0)); b != last {
		t.Fatalf("max latency in bucket %d; want %d", b, last)
	}
	for us, want := range map[uint64]uint64{0: 1, 3: 4, 4: 5, 7: 8, 8: 10, 511: 512, 512: 640, 700: 768, 1000: 1024} {
		if got := ledger.LatencyBucketUs(ledger.LatencyBucket(us)); got != want {
			t.Errorf("%d µs: bound %d; want %d", us, got, want)
		}
	}
}
