// Package envelope holds the pure building blocks of the red-envelope
// business: the double-mean share rule (DrawShare) and its PRNG (Rand),
// campaign pacing (Pacer), a SET's pool of waiting shake envelopes
// (Pool) and envelope ids (IDGen).
//
// Nothing here touches a socket, a clock or a lock: the pipeline stages call
// these from their own goroutine and pass in the time. Each value is owned by
// one goroutine and is not safe for concurrent use; the package-level
// functions are safe anywhere.
package envelope
