package journal

import (
	"sync/atomic"
	"time"
)

// Metrics are the journal's counters (the writer's, the checkpoint's, what
// Open cut); any goroutine may read them.
type Metrics struct {
	Records, Bytes, Rounds, Fsyncs atomic.Uint64
	FsyncNs                        atomic.Uint64               // sum of fsync latencies
	FsyncBuckets                   [FsyncBuckets]atomic.Uint64 // FsyncBucketUs(i) µs and less (the last: more)
	Segments                       atomic.Uint64               // segment files created
	Checkpoints                    atomic.Uint64               // checkpoint writes
	// What Open cut: torn tails, repairs (each cut, segment moved aside or
	// file found missing), and the bytes and records they held.
	TornCuts, Repairs, CutBytes, CutRecords atomic.Uint64
	// With a sink: messages acknowledged, groups fenced, groups failed
	// otherwise. A round's publish-to-last-ack time is in the fsync
	// histogram.
	Messages, Fenced, GroupFailures atomic.Uint64
}

// FsyncBuckets is the fsync latency histogram's bucket count.
const FsyncBuckets = 16

// FsyncBucketUs is the upper bound of fsync bucket i in µs: 16 µs doubling,
// up to ~0.5 s.
func FsyncBucketUs(i int) uint64 { return 16 << i }

// observe counts one fsync that took d.
func (m *Metrics) observe(d time.Duration) {
	m.Fsyncs.Add(1)
	m.FsyncNs.Add(uint64(d))
	us := uint64(d / time.Microsecond)
	i := 0
	for i < FsyncBuckets-1 && us > FsyncBucketUs(i) {
		i++
	}
	m.FsyncBuckets[i].Add(1)
}
