// Package jsjournal is the journal's replicated home: the SETs' records,
// their snapshots and their claims on NATS JetStream, so that a SET's state
// can be loaded on any gateway and a writer that lost a SET can append to it
// no more.
//
// It owns the stream <prefix>_journal (subjects <prefix>.j.<set> per SET and
// <prefix>.j.cluster for the records of no SET), the Object Store bucket
// <prefix>_snapshots, and the format of what it puts in them. It is a
// journal.Sink: the journal's writer hands it each group's records of a
// round, and it publishes them as one message per group, all in flight at
// once. It gives records no meaning and may not touch the business' state,
// the SETs or their ownership: it appends, fences, snapshots and replays,
// and whoever owns a SET decides when.
//
// # Messages
//
// A message is a journal round's records of one group, whole, in the
// journal's record format (each producer's in the order appended), with the
// writer's gateway in the Hongbao-Gateway header. Every append carries
// Nats-Expected-Last-Subject-Sequence, the last sequence the writer knows for
// the subject: JetStream refuses it if anyone else appended since, and the
// journal fences the group (journal.ErrFenced). A claim is a message with no
// records and the Hongbao-Claim header (the owner's epoch): the new owner's
// first append, conditional like every other, so that the old owner's next
// one is refused. A replay drops, and counts, the messages after a claim
// that do not come from the claimed owner.
//
// # Snapshots
//
// A group's snapshot is an object <set.N|cluster>.<seq, 16 hex digits> in
// the bucket, holding each producer's state as of its mark of snapshot ID
// and seq, the earliest message holding one of those marks: the replay reads
// from it, skipping each producer's records up to its mark. Once it is put,
// the subject's messages before seq are purged, and the group's older
// snapshot objects deleted. Names carry seq so that no put replaces a newer
// snapshot: a writer fenced while it wrote one leaves an older object,
// never read, and its purge removes only what the newer snapshot holds.
//
// # Design choices
//
// One line of reason each; the figures are in docs/DESIGN.md under the
// title given.
//
//   - One stream with a subject per SET, not a stream per SET: each stream
//     is a Raft group, and 33 of them at R3 would cost 99 Raft logs and
//     their fsyncs on every node for what one log carries (docs/DESIGN.md,
//     One JetStream stream for every SET's journal).
//   - Appends conditional on the subject's last sequence: fencing by the
//     store itself, with no lease or clock (docs/DESIGN.md, Fencing by the
//     expected last sequence).
//   - Snapshots named by the sequence they replay from, in an Object Store:
//     a SET's pools outgrow a message, and no put can replace a newer
//     snapshot (docs/DESIGN.md, Snapshots per SET in an Object Store).
package jsjournal
