// Package journal is the server's write-ahead journal: the changes of state
// that money depends on, made durable before any answer reports them
// (docs/PROTOCOL.md, Durability).
//
// It owns the segment files under the data directory and their format, the
// producers' rings and the one writer goroutine. It gives record types no
// meaning: the stages, the campaigns and the recovery define and read them.
// It may not touch the business' state, rings or sockets: it publishes
// positions, and whoever holds an answer gates on them.
//
// # Records
//
// A record is len u32 · crc u32 (CRC-32C of len and body) · type u8 ·
// producer u16 · payload: a change of state, not a request.
//
// # Rounds, segments and the checkpoint
//
// Each round of the writer is one write framed by a round header (magic ·
// seq u64 · body length · CRC-32C of the body · CRC-32C of the header) and
// one fdatasync; its seq is one more than the last round's, over the
// journal's life. Segments (NNNN.journal, 64 MiB) start with a header
// holding the number of SETs (envelope ids name their SET: a journal of
// another count is refused), the segment's index, and the previous
// segment's final size and last round, so that an older segment shortened,
// replaced or missing is caught by its successor. A checkpoint file holds
// the last durable position (segment, offset, round) in two slots written
// alternately, so that a write torn by a crash leaves the other; its own
// goroutine writes it after rounds, at most every 10 ms, never in a round's
// way, and Close, RemoveBefore and a snapshot write it too. A new journal's
// checkpoint exists before its first segment, so segments without one are
// refused.
//
// A crash can tear only the last round: every round before it was synced
// before it was written, and no answer told of it. So at Open a bad round is
// a torn tail, cut (its bytes kept beside the segment unless all zeros), only
// in the newest segment, at or after the checkpointed position, and with no
// valid round header of a later round anywhere after it. Anything else — a
// bad round before the end or under the checkpoint, a segment missing,
// shorter than its successor or the checkpoint say, the checkpoint missing,
// a replay whose first segment is not its snapshot's — stops the start with
// a CorruptError naming the file and offset, since what the journal lost
// cannot be known. Options.Repair cuts there instead, keeping every byte it
// cuts in files beside the journal, and rewrites the checkpoint. What stays
// unseen: a cut that removes only rounds synced after the last checkpoint
// write, at most its interval (10 ms) of rounds.
//
// # Producers and the writer (group commit)
//
// Each appender (a stage of a SET, the campaign runner) owns a Producer: a
// byte ring it fills with Append, allocation-free, and hands over once per
// batch with Publish (one atomic store, and a wake-up only when the writer
// sleeps). The one writer copies every producer's published bytes into one
// buffer, makes one write and one fdatasync, then stores each producer's
// durable position. A round starts no sooner than Options.RoundEvery (1 ms)
// after the last one began: what is published meanwhile shares the next
// round, and a paced writer is not idle, so publishing wakes no one. A
// position is the producer's byte offset since the start, so a waiter gates
// with one atomic load (Producer.Durable) and no lock; the writer's OnDurable
// hook lets the server wake the SETs whose egress holds answers, so nothing
// spins. Records of one producer replay in the order appended; records of
// different producers may interleave, so each piece of state is changed by
// one producer only (the stage that owns it).
//
// A failed write or sync is sticky: Failed reports it, durable positions stop
// moving, Append drops records instead of waiting on a full ring, and the
// server stops handing out money.
//
// # Snapshots
//
// The journal does not know the state; it offers what a snapshot needs: Rotate
// (start a new segment: everything published after it lands there or later),
// Producer.Mark (a reserved record: this producer's state as of here is in
// snapshot id), Replay from a snapshot (each producer's records after its
// mark, from the snapshot's segment on) and RemoveBefore. The server asks
// each stage for its state through its ring, so each one writes it on its
// own goroutine at a point of its own stream, with no lock and no pause of
// the other SETs.
//
// # The gate
//
// A stage stamps each money answer with (producer, position); the egress
// holds it until Durable, and the writer's OnDurable wakes it.
//
// # Design choices
//
// One line of reason each; the alternatives rejected, and the figures that
// settled them, are in docs/DESIGN.md under the title given.
//
//   - Changes of state are journalled, not requests: replay needs no
//     randomness, clock or user input, and an empty SHAKE or a CHAT writes
//     nothing (docs/DESIGN.md, Journal changes of state, not requests).
//   - One writer makes every producer's records durable with one write and
//     one fdatasync a round: the disk's sync rate, not its bandwidth, is the
//     limit (docs/DESIGN.md, Group commit by one writer).
//   - Producers hand their records over through byte rings of their own: one
//     atomic store per batch, no lock or channel on the hot path
//     (docs/DESIGN.md, Producers' byte rings).
//   - A position per producer, not one sequence for all: nothing hands
//     positions out, and the egress knows whose record it waits for
//     (docs/DESIGN.md, A position per producer).
//   - The journal's own writer, not github.com/tidwall/wal: it measured the
//     same, and it gathers and gates without locks, which the library cannot
//     (docs/DESIGN.md, The journal's own writer, not tidwall/wal).
//   - Rounds paced by RoundEvery: an fdatasync costs about the same CPU
//     whatever it holds, so a light load's rounds would cost more than the
//     answers they carry (docs/DESIGN.md, Paced rounds).
//   - Money answers gated one by one at the egress: only they wait for the
//     sync, and no SET's goroutine blocks on it (docs/DESIGN.md, The gate at
//     the egress).
//   - The writer ticks the held SETs awake rather than running their batches
//     itself: no cheaper, and it would delay its next round (docs/DESIGN.md,
//     Held SETs woken by a tick).
package journal
