// Package transport holds the two alternatives to our ring (package ring) for
// carrying a SET's events through its chain of stages. They exist only for the
// ablation study (`make perf-compare`, server flag -pipeline): the same stage
// handlers, the same producers and the same event.Bus, with only the transport
// between them swapped, so that the cost of the transport itself shows. It
// knows nothing of the business (it imports only package ring) and is never
// the default.
//
//   - Disruptor (-pipeline=disruptor) drives the stages with
//     github.com/smarty/go-disruptor v0.5.0: a preallocated ring of our own, its
//     multi-writer sequencer, one handler group per stage in order, and its
//     default wait strategy, which polls with sleeps (Idle: 500 ns) and yields
//     (Gate) instead of parking.
//   - Chan (-pipeline=chan) is the classic Go design: one buffered channel in
//     front of each stage and one goroutine per stage; events travel by value.
//
// Both satisfy event.Transport (the same method set as *ring.Ring), take
// ring.Handler stages and hand them ring.Batch values, so the handlers are
// the same code. Both add what the server needs and neither library gives:
// occupancy accounting for TryClaimLeaving (headroom for answers), a Close
// that refuses new claims and drains every claimed event through every stage
// before it returns, and a stage panic turned into Err instead of a crash.
//
// Why the ring is the default: with hundreds of stages sharing two cores, a
// waiting stage must not burn CPU, and go-disruptor's waits poll on a timer
// (its idle handlers keep cores busy, see package ring's doc); channels cost a
// lock and often a goroutine switch per event per stage and cannot hand a
// stage a contiguous batch without a copy. The ring parks without losing
// wake-ups and hands out batches in place.
package transport
