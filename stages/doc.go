// Package stages holds the business stages of a SET: session, shake and
// split. Each runs as a stage of the SET's ring and owns its state outright
// (no locks): the session stage the SET's table of online users, the shake
// stage the SET's pool of shake envelopes, the split stage the SET's group
// envelopes. Each writes its own group of the SET's counters (package
// ledger) and no other.
//
// Stages never touch sockets: what a stage decides it writes into the event
// (the answer frame, a resolved connection) for the egress stage downstream,
// or publishes into another SET's ring through an event.Outbox. That keeps
// them testable without a network. Nor do they know which transport carries
// them or what runs after them: package set wires them.
//
// The chain of every SET is session → shake → split → egress; every stage
// sees every event, in sequence order, and acts on the kinds it owns.
package stages
