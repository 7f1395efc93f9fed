// Package set builds the SETs of a server. A SET is one shard of the users
// and envelopes: a transport (our ring, or for comparison one of package
// transport's) carrying its events through its four stages in order,
// session → shake → split (package stages) → egress (package egress), and
// the ledger those stages write (package ledger).
//
// It owns the wiring alone: which transport, which stage after which, how
// many events a stage takes at once, how the stages' random numbers are
// seeded. It decides nothing about requests or money, touches no socket,
// and neither starts nor stops the SETs: the bus it returns does, and the
// server drives it.
//
// With a journal it gives each SET's shake and split stage a producer, in
// SET order, so that a producer's id means the same stage at every start
// with the same number of SETs, and Replay routes each record back to the
// stage that wrote it.
//
// Building is two-phase because the stages publish into other SETs: every
// SET's transport must exist, and the bus over them, before any stage is
// made. Build does both phases; New and AddStages are the phases.
package set
