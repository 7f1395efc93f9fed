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
// producer u16 · payload: a change of state, not a request, so that replay
// needs no randomness, clock or user input.
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
// after the last one began: an fdatasync costs ~70 µs of CPU here whatever
// it holds, so back-to-back rounds of a few records each cost more than the
// answers they carry; what is published meanwhile shares the next round, and
// a paced writer is not idle, so publishing wakes no one. A position is the producer's byte offset since the
// start, so a waiter gates with one atomic load (Producer.Durable) and no
// lock; the writer's OnDurable hook lets the server wake the SETs whose
// egress holds answers, so nothing spins. Records of one producer replay in
// the order appended; records of different producers may interleave, so each
// piece of state is changed by one producer only (the stage that owns it).
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
// holds it until Durable, and the writer's OnDurable wakes it. Rejected:
//
//   - The journal as a fifth stage in each SET's ring, between split and
//     egress: it would have to write and sync per SET (32 syncs per round)
//     or hand its batch to a shared writer and wait for it, which is this
//     design with one more hand-off per batch and the SET's goroutine
//     blocked meanwhile.
//   - The egress blocking on the durable position before writing its batch:
//     simple, but every answer of the batch (PONGs, chat, empty SHAKEs)
//     would wait for the sync, and in a fused SET the next batch's stages
//     too.
//   - Journalling requests at the ingress (command sourcing): replay would
//     need the stages' randomness and clock, and an empty SHAKE or a CHAT
//     would cost a write.
//   - The writer running the held SETs' batches itself after a round, under
//     the ring's run claim as the epoll loops do, instead of ticking them
//     awake: in four interleaved runs at 10,000 SHAKE/s with a campaign
//     filling the pools it cost no less CPU per SHAKE than the tick (a
//     median 54 against 50 µs), and it delays the writer's next round.
//
// # Rejected writers
//
//   - A lock-protected shared buffer (pebble's commitPipeline appends under a
//     mutex): every SET would contend on each batch; the rings cost one
//     atomic store per batch.
//   - A channel of batches: an allocation or a pool per batch, and a lock
//     inside the channel on the hot path.
//   - Writing from each SET (a file per SET): 32 fsyncs per round instead of
//     one; the disk's sync rate, not its bandwidth, is the limit.
//   - A global sequence across producers: positions would have to be handed
//     out in the order the writer sees them, a point of contention; a
//     position per producer needs none, and the egress knows whose record
//     it waits for.
//   - github.com/tidwall/wal as the writer: measured the same (below), but it
//     is a single-appender log indexed by entry: gathering 32 SETs into it
//     takes a lock or a channel, its sync is fsync (metadata too) where
//     fdatasync suffices, and it keeps a per-entry index the replay does not
//     need.
//
// # Figures
//
// go test -run '^$' -bench Writer -benchtime 1s -count 3 ./journal/ (2
// vCPUs, the shared VM's disk, medians of 3): rounds of R records of a
// SHAKE's size from 32 producers, one sync each; records durable a second,
// and a round's commit (write + sync) latency:
//
//	round   journal                       tidwall/wal
//	1       5,259/s    p50 0.17 p99 0.31 ms    5,788/s    p50 0.17 p99 0.28 ms
//	64      240,568/s  p50 0.25 p99 0.44 ms    280,509/s  p50 0.20 p99 0.44 ms
//	512     1,500,699/s p50 0.34 p99 0.48 ms   1,490,005/s p50 0.22 p99 0.94 ms
//
// The sync dominates: at the same round size the two are within the VM's
// noise, and group commit is what makes a million records a second durable.
// The journal is chosen for the gathering and the gating it does without
// locks, which the library cannot.
//
// In the server (bin/server, 32 SETs, loopback load client, same 2 cores):
//
//   - 10,000 SHAKE/s for 10 s: 19,438 rounds of ~5 records each; fdatasync
//     p50 ≤ 0.26 ms, p99 ≤ 4.1 ms, 0.3 % over 8 ms, the slowest 131–262 ms
//     (hongbao_journal_fsync_seconds); the writer spent 87 % of the time in
//     fdatasync.
//   - What durability costs (go run ./perf/cmd/compare -variants
//     ring,nojournal -repeat 2 -steps "" -users 10000 -qps 10000
//     -qps-duration 10s -high-qps 30000 -high-duration 10s): at 10,000
//     SHAKE/s p99 24.97 ms against 1.72 ms without the journal, 39.7 against
//     25.6 µs of server CPU per SHAKE; at 30,000 SHAKE/s p99 316 ms against
//     39 ms in the first round (the second round was noise for both: 1.2 s
//     and 1.6 s). The tail is the disk's: one slow sync holds every money
//     answer of its round and the next.
//   - Paced rounds (RoundEvery 1 ms) against rounds back to back, five
//     interleaved runs at 10,000 SHAKE/s with a shake campaign filling the
//     pools at 8,000/s: medians of 41.7 against 66.9 µs of server CPU per
//     SHAKE (28.2 without the journal), ~450 against 800–2,000 fdatasyncs a
//     second, SHAKE p50 1.29 against 0.88 ms.
//   - Replay: 16 million records a second decoded and checked (go test -run
//     '^$' -bench Replay -benchtime 3x -count 3 ./journal/, median); a start
//     after kill -9 with 2,000,000 envelopes dealt and 94,881 got (129,236
//     records, 11 MB, no snapshot) recovered in 61 ms; the snapshot of that
//     state (1,905,119 pooled envelopes) is 22.9 MB, written in 222 ms, and a
//     start from it took 52 ms.
package journal
