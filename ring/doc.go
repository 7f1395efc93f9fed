// Package ring is hongbao's Disruptor (LMAX): a preallocated ring of events
// that producers fill in place and a small graph of stages consumes in
// sequence order, each stage on its own goroutine, with sequences instead of
// locks and batches instead of per-event hand-offs. It knows nothing of the
// business: it imports no other hongbao package, and what an event means is
// its stages' affair.
//
// # Shape
//
// A Ring[T] owns a power-of-two slice of T allocated once. Producers claim n
// slots (Claim blocks for room, TryClaim fails at once with ErrFull), fill them
// through At and Publish them. Stages are added before Start; a stage with no
// upstream reads what producers published, a stage with upstream stages reads
// only what all of them have finished. Each stage is handed contiguous batches
// [Lo, Hi] so it knows where a batch ends (egress flushes once per batch).
// Producers are gated by the leaves of the graph: a slot is reused only after
// every leaf has finished the event in it.
//
// # Waiting
//
// Hundreds of rings with several stages each share two cores, so a waiting
// stage must not burn a core. The default strategy (WaitPark) spins briefly,
// yields, then parks on a signal owned by the sequence it is missing: the
// ring's publish cursor for a first stage, the upstream stage's progress for a
// later one (a slow upstream stage never makes its downstream spin: LMAX issue
// 222). A waker pays one atomic load while nobody is parked. A parker announces
// itself before it re-checks the sequence; since Go's atomics are sequentially
// consistent, either the parker sees the new sequence or the waker sees the
// parker, so no wake-up is lost.
//
// # Running a fused ring on a producer's goroutine
//
// A fused ring's stages may also run on a producer's goroutine: Run takes
// the ring's run claim (a CAS on a flag), hands what is published to every
// stage in turn, at most a given number of events, and lets go. Whoever
// holds the claim is the only one running the stages, so each stage still
// owns its state alone and sees every event once, in order; the claim's
// atomics order one holder's writes before the next one's reads. A producer
// that publishes with PublishQuiet wakes nobody and then calls Run. The
// rule that loses no event: whoever lets go of the claim re-checks for
// published events and runs them or wakes the ring's goroutine; a Run that
// finds the claim taken returns at once, and since its publish came before
// its failed CAS, the holder's re-check after letting go sees it. The ring's
// goroutine waits while the claim is held (its park condition is "published
// and not claimed"), and is woken by a holder that stops with events left
// (past its limit) or on Close. A stage that panics under Run fails the ring
// as on the ring's goroutine. The ring's goroutine, when it holds the claim,
// runs at most fusedTurn (256) events and yields before it claims again, so
// that a busy ring passes back to the producers that run it rather than
// staying on a goroutine that waits for a P behind them (docs/DESIGN.md, A
// turn for the ring's own goroutine).
//
// # Rejected designs
//
// go-disruptor's WaitStrategy hooks (Gate, Idle, Reserve) are called without a
// way to re-check the barrier after announcing a park, so a blocking wait on
// them either loses wake-ups or polls on a timer (its default sleeps 500 ns
// when idle and 1 ns when the ring is full, so idle handlers burn the
// cores). Channels between stages cost a lock and often a goroutine switch
// per hand-off and cannot hand a consumer a batch. Both are kept as
// benchmark peers (ring_timing_test.go; docs/DESIGN.md, Our own ring).
//
// # Sequences
//
// Sequences are int64 and start at 0. They never wrap: at 10^9 events per
// second an int64 lasts 146 years, and the top bits are reserved for the
// closed flag. Slot wrap-around (seq & mask) is exercised by tests that start
// at arbitrary sequences.
package ring
