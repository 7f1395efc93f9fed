// Package stages holds the business stages of a SET: session, shake and
// split. Each runs as a stage of the SET's ring and owns its state outright
// (no locks): the session stage the SET's table of online users, the shake
// stage the SET's pool of shake envelopes, the split stage the SET's group
// envelopes. Each writes its own group of the SET's counters (package
// ledger) and no other.
//
// What a client can make the server hold is bounded where it is held:
//
//   - The session stage keeps the ENVELOPE pushes to users of its SET who
//     were offline (pending.go): only it knows who is online. At a user's
//     login it sends each back to its envelope's SET (KRepush), whose split
//     stage pushes it again if the user can still open it. Kept: the newest
//     PendingPerUser per user, and at most MaxEnvelopes × MaxShares in all,
//     the oldest dropped first. A kept push may name an envelope that has
//     since expired or been opened: it waits until the login (stale) or
//     until it is dropped. The session writes no journal: it marks the
//     events that keep or take pushes, and the split stage downstream
//     journals them (RecKeep, RecTake) and carries the list in its snapshot
//     part, so the kept pushes are the SET's state.
//   - The split stage holds the SEND limits (senders.go): a SEND is made in
//     the sender's SET and its envelope lives there, so the stage that
//     creates, opens and expires the envelopes also sees every SEND and
//     every change of a sender's live envelopes. Per user a token bucket
//     (SendRate, SendBurst), forgotten only once full, so reconnecting buys
//     nothing, and a count of its live envelopes (MaxLive); per SET its
//     share of the server's budget (MaxEnvelopes), which also bounds the
//     fully opened envelopes kept for a repeated OPEN: the oldest are
//     forgotten early for room. A SEND past any limit is answered 3.
//
// Stages never touch sockets: what a stage decides it writes into the event
// (the answer frame, a resolved connection) for the egress stage downstream,
// or publishes into another SET's ring through an event.Outbox. That keeps
// them testable without a network. Nor do they know which transport carries
// them or what runs after them: package set wires them.
//
// The shake and split stages journal each change of their state (records.go:
// envelopes dealt, got, returned; group envelopes created, opened, taken
// back, refunded, forgotten; a send campaign's envelope skipped), each to its
// own journal producer, once per batch handed to the writer; they stamp each
// money answer with the position the egress waits for. Requests that change
// nothing (an empty SHAKE, PING, CHAT, LOGIN) journal nothing: chat stays
// at-most-once, logins are not kept. At recovery, Restore applies the records
// in the order they were appended: the pool is a FIFO, so a replayed pop
// takes the very envelope it took. Once the journal has failed they hand out
// no money: SHAKE answers 2, SEND and OPEN overloaded.
//
// The chain of every SET is session → shake → split → egress; every stage
// sees every event, in sequence order, and acts on the kinds it owns.
package stages
