// Package jsjournal is the journal's replicated home: the SETs' records,
// their claims and their snapshots on NATS JetStream, so that a SET's state
// can be loaded on any gateway, a writer that lost a SET can append to it
// no more, and no gateway can write as another.
//
// It owns the layout (Layout): the stream <prefix>_journal and a snapshot
// bucket <prefix>_snapshots_<node> per gateway, which an operator's
// identity creates and changes (Provision, cmd/jsadmin) and gateways only
// check (Check: a difference is refused, named); and the format of what it
// puts in them. It is a journal.Sink: the journal's writer hands it each
// group's records of a round, and it publishes them as one message per
// group, all in flight at once. It gives records no meaning and may not
// touch the business' state: it appends, claims, fences, snapshots and
// replays, and whoever owns a SET decides when.
//
// # Messages
//
// Every message's subject names its SET and the gateway that appended it:
// <prefix>.j.<set>.<node>.r<gen> a round's records of one group, whole, in
// the journal's record format (each producer's in the order appended);
// <prefix>.j.<set>.<node>.c a claim (Hongbao-Claim: the owner's epoch) or a
// release (Hongbao-Release). A gateway's NATS user may publish on its own
// node's subjects only, so NATS proves who wrote each message; headers are
// the writer's word and prove nothing. Every append carries
// Nats-Expected-Last-Subject-Sequence with
// Nats-Expected-Last-Subject-Sequence-Subject <prefix>.j.<set>.>: the last
// message of the SET, any gateway's, that the writer knows. JetStream
// refuses it if anyone appended since, and keeps both headers with the
// message: a reader knows which messages NATS fenced.
//
// A SET's owner is its last valid claim (Claims): a claim one epoch after
// the one before, or a release by the owner at its epoch. A claim fences
// the old owner, whose next append is refused; a writer whose append is
// refused reads what came after its last, and goes on if all of it fences
// no one — a message appended without the expected last sequence, another
// gateway's round, a claim out of turn: forgeries, counted (Refused). A
// replay hands over only the owner's rounds that NATS fenced, and drops and
// counts any other message.
//
// # Snapshots and compaction
//
// A group's snapshot is an object <set>.<seq, 16 hex digits> in its
// owner's bucket, holding each producer's state as of its mark of snapshot
// ID, seq (the earliest message holding one of those marks), and the
// owner's node, epoch and claim. A reader trusts it only if its owner's
// claim is where it says, at its epoch, and no claim came between that
// claim and seq: else it is refused, counted, and the next newest is read.
// A group's rounds go to a generation (r0, r1, r2) that turns at each
// snapshot (journal.Journal.RotateGroup), so that every message of the one
// retired precedes the snapshot's marks; once the next snapshot is put,
// the owner compacts the generation before the previous one with a message
// that rolls its subject up (Nats-Rollup: sub; journal.Journal.Compact). A
// rollup drops messages of its own subject only, so no gateway can compact
// another's: what a gateway wrote of a SET it no longer runs stays until it
// runs that SET again and snapshots twice, or an operator removes it.
//
// # Design choices
//
// One line of reason each; the figures are in docs/DESIGN.md under the
// title given.
//
//   - One stream with subjects per SET, not a stream per SET: each stream
//     is a Raft group, and 33 of them at R3 would cost 99 Raft logs and
//     their fsyncs on every node for what one log carries (docs/DESIGN.md,
//     One JetStream stream for every SET's journal).
//   - Appends conditional on the SET's last sequence: fencing by the store
//     itself, with no lease or clock (docs/DESIGN.md, Fencing by the
//     expected last sequence).
//   - The writer in the subject, the owner in the journal's claims: NATS
//     proves every message's writer, so no gateway's credentials speak for
//     another (docs/DESIGN.md, Who wrote a journal record: the subject).
//   - Snapshots named by the sequence they replay from, in their writer's
//     bucket: a SET's pools outgrow a message, no put can replace a newer
//     snapshot, and only the writer may put there (docs/DESIGN.md,
//     Snapshots per SET in an Object Store).
package jsjournal
