// Package ingress is the read side of the server: it accepts connections,
// decodes their frames and publishes each as an event into the ring of the
// SET that owns its work. It is the conn.Owner of every connection it
// accepts. It does not touch money or any stage's state, and once a
// connection is logged in it writes nothing to it: its refusals and ERRORs go
// to the SET's egress as events (bare mode, -pipeline=none, aside).
//
// # Shape (ModeEpoll, Linux)
//
// A fixed number of event loops (Options.Loops), each a goroutine with its
// own epoll instance, level-triggered, over non-blocking sockets; no
// goroutine per connection. Every loop has every listener in its epoll with
// EPOLLEXCLUSIVE, so a new connection wakes one idle loop, which accepts it
// and keeps it (accept_linux.go explains why not SO_REUSEPORT per loop or an
// acceptor goroutine). Accept errors such as EMFILE take the listeners out of
// that loop's epoll for 10 ms, doubling to 1 s, while reading goes on; past
// Options.MaxConns a connection is accepted and closed at once (Refused).
//
// Connections live in a slab of fixed 1024-connection chunks (slab.go); a
// connection is named by its slab id in epoll_event's data and in
// conn.Conn.Scratch, so the loop finds it by indexing and the Owner methods
// find it from the *conn.Conn. About 120 bytes of Go heap per idle
// connection, in chunks the GC scans as a few large objects; free records go
// on a mutex-guarded free list (Release runs on egress goroutines, once per
// connection).
//
// # Reading
//
// After a round with events (which may have woken SETs) the loop yields
// (runtime.Gosched) before it blocks in epoll_wait again, so that the SET
// goroutines it woke run on its P at once: a thread blocked in a raw syscall
// keeps its P, and waking another thread per request was a quarter of the
// server's CPU. Not with Options.NoYield: consumers that poll (go-disruptor's
// listeners, -pipeline=disruptor) are always runnable, and a yield queues the
// loop behind all of them (it then served 1,500 SHAKEs a second of 30,000).
// With the loops running the SETs themselves (below) a round seldom wakes
// any: what is left to yield to is a SET woken by another SET, a campaign or
// the ticker. Rejected: yielding only after a round in which a ring woke a
// parked goroutine (a process-wide count of the rings' wakes, read before
// and after the round). Five interleaved rounds at 45,000/s beside the
// yield after every round and bare I/O (2026-12-01): server CPU per SHAKE
// 19.5 against 17.3 µs (bare I/O 18.0), the load client's 15.8–16.9 against
// 17.7–18.8 µs, p99 17.6 against 13.3 ms (bare I/O 20.6), and one phase
// that fell to 36,862 answers a second. Untested guess at why: the yield
// also hands the P to the ticker and the runtime's other goroutines, which
// otherwise wait for sysmon to take it from a loop blocked in epoll_wait.
//
// Each ready connection gets one read of at most Options.ReadBudget bytes
// (64 KiB) per round into the loop's single read buffer, after the partial
// frame it kept from the previous round. A connection with more to read is
// still readable, and level-triggered epoll reports it again next round, so
// a busy connection cannot starve the others. Every complete frame is
// decoded with proto.NextRequest and handled at once; a trailing partial
// frame is copied to c.In, a buffer borrowed from bytebufferpool and
// returned when the frame completes: an idle connection holds no buffer.
// Events carry RecvNs = the clock at the start of the chunk of runEvery
// (64) ready descriptors (reads, mostly) in which the read that completed
// their frame was: the server's decode → write (hongbao_latency_seconds)
// counts the reads before it in its chunk, whose SETs run after them, but
// not those of earlier chunks, which it waited for in the kernel as it
// would in front of any server (the client sees that wait). A clock read
// per read would be exact and cost ~150 ns on the development VM, ~1 % of a
// SHAKE.
//
// # Running SETs
//
// A loop publishes a request without waking its SET (event.Bus.RunningBus)
// and remembers the SET; after every runEvery (64) ready descriptors, and
// at the end of the round, it runs the batch of each SET it published into
// on its own goroutine (ring.Ring.Run): session, shake, split and egress,
// up to runLimit (256) events, the answers written before it reads on. Only
// one goroutine runs a SET's stages at a time: a loop that finds the SET's
// goroutine (or the other loop) running it leaves its events to that one,
// which re-checks for them when it lets go; what is past runLimit goes to
// the SET's goroutine. The ring still orders everything: every stage sees
// every event once, in sequence order, whoever runs it. Not with
// Options.Handoff (-handoff), nor for SETs whose stages are not fused.
//
// Why: a hand-off costs milliseconds between decode and write. Each publish
// that wakes a SET's goroutine makes it runnable on the loop's P, where it
// waits for the rest of the loop's round (up to 512 reads) and then for the
// SETs woken before it. A runtime trace of 4 s at 30,000 SHAKE/s over
// 19,000 connections (go tool trace -pprof=sched) with -handoff holds 6.5 s
// of goroutines runnable and not running: 61 % SET goroutines readied by
// the loops' publishes, 35 % the loops queued behind them after their
// yield; with the loops running their SETs, 0.18 s. In back-to-back runs at
// 30,000/s (the server's own figures over 10 s, go_sched_latencies_seconds
// and /proc/PID/task/*/schedstat), running them against -handoff: the Go
// scheduler's p99 0.01–0.03 ms against 0.26–0.79 ms, a third fewer context
// switches, 16 % less CPU per SHAKE, and in the calmer pair decode → write
// p99 ≤ 0.26 ms against ≤ 1 ms (p99.9 ≤ 2 against ≤ 33 ms). What is left of
// the tail on a shared VM is the kernel's run queue: the server's threads
// waited 0.4–1.3 s per second for a CPU that the load client and other
// tenants held, inline or not.
//
// Rejected: no runLimit (a loop runs all that a SET has waiting): two
// interleaved pairs at 45,000/s gave server p99 ≤ 33 and ≤ 66 ms and client
// p99 1.0 and 2.0 s, against ≤ 4 and ≤ 33 ms and 16 and 114 ms with it.
// runEvery 1 (a SET run after every read, as bare I/O answers): 7–10 % more
// CPU in two pairs at 45,000/s and no better tail. runEvery 16 against 64,
// two pairs at 30,000/s: server p99 ≤ 2 and ≤ 1 ms against ≤ 1 and ≤ 2 ms
// (these bounds, and those below, are of the power-of-two buckets the
// latency histograms had then), CPU alike; the VM's noise is larger than
// the difference, so the one with fewer runs stays. runEvery 16 and 4
// against 64, five interleaved rounds at 45,000/s with bare I/O beside them
// (2026-12-01): the server's decode → write p99 ≤ 1.02 and ≤ 0.51 ms
// against ≤ 2.05 ms, but the client's p99 43.9 and 23.1 ms against 20.5 ms
// (bare I/O 14.3 ms) at 1.03× and 1.06× the CPU: a shorter hop inside the
// server did not shorten the tail the client sees, which forms before the
// read. Moving a logged-in connection to a home loop of its SET (SET i on
// loop i mod the loops), so that one thread reads it, runs its SET and
// writes its answers as a bare I/O loop does: the load client spent ~1 µs
// more per SHAKE against the ring than against bare I/O with two loops and
// ~1 µs less with one, and the loops writing each other's connections were
// the suspect. Five interleaved rounds at 45,000/s (2026-12-02): the
// client's CPU per SHAKE 16.8–18.9 µs with homes against 17.1–19.4 without
// (bare I/O 16.4–17.2), the server's 17.3–20.3 against 17.4–19.8,
// median-round p99 24.3 against 32.6 ms (bare I/O 19.3): nothing the noise
// does not cover, for a hand-over between epolls and an atomic loop index
// on the egress's path. On loopback a segment's receive work runs in
// whichever process sends it (or holds the receiving socket), so CPU moves
// between server and client with timing; their sum is what a shared machine
// pays.
//
// # Blocking
//
// An idle loop blocks in a raw epoll_wait, which keeps its P until the
// runtime's sysmon retakes it (20 µs to 10 ms later, when something else is
// runnable). Options.NetpollWait (-loop-wait=netpoller) parks it in Go's
// netpoller on its epoll descriptor instead, holding no P (park_linux.go).
// Five interleaved runs of both at 45,000 SHAKE/s over 19,000 connections
// (make perf-compare's latency rounds, 2026-12-01): with bursty CPU taken by
// other processes (a compile; two processes busy 30 ms of every 100;
// compare -noise 2) the netpoller had the lower p99 in 12 of 16 rounds,
// median round 88 against 1,388 ms, 22 against 71 ms, 269 against 372 ms;
// on the VM alone in 3 of 13, with 0.89–1.21× the server CPU per SHAKE (a
// park and its wake-up go through the runtime's poller and another thread,
// a second epoll_wait per idle round). It stays an option: it won where
// other processes took the CPU in bursts and lost where they did not, and
// neither side held in every run.
//
// # Ownership
//
// Before LOGIN the ingress alone writes and closes a connection: a first
// frame other than LOGIN, a bad user or token, a malformed frame or the login
// timeout get one best-effort non-blocking write of the answer (ERROR or
// LOGIN_ACK), then the ingress releases the connection itself. A good LOGIN
// is published as KLogin into the user's SET, whose egress is from then on
// the only writer and the only releaser: on EOF the loop takes the socket out
// of epoll and publishes KDisconnect, and the egress calls Owner.Release after
// handling it. The descriptor is closed only by Release.
//
// An ERROR the ingress writes or asks for (KFatal) carries stamp 0, as
// docs/PROTOCOL.md (Stamps on ERROR) requires, in every mode: ERROR 1 for a
// second LOGIN too, and a violation can be certain after 2 bytes, before any
// stamp; timeouts and shutdown answer no frame. Only ERROR 3, for a first
// frame other than LOGIN, echoes that frame's stamp. LOGIN_ACK 1 and 2 echo
// the LOGIN's stamp.
//
// # Full rings
//
// A request is claimed with Bus.ClaimRequest, which leaves headroom; when it
// is refused the ingress publishes the "overloaded" answer instead, with
// Bus.ClaimAnswer into the requester's own SET. If even that is refused, the
// connection stalls: its input is paused in epoll, its undecoded bytes stay
// in c.In, and it is retried every round (epoll_wait waits 1 ms while
// anything is stalled). No request is dropped and the loop never blocks.
// KLogin, KPing, KFatal, KWritable and KDisconnect use ClaimAnswer and stall
// the same way.
//
// # Shedding by delay
//
// A full ring is rare: past the capacity of the machine the backlog sits in
// the kernel's socket buffers, where no ring sees it, and every request is
// served, seconds late. So with Options.ShedDelay (the server's -shed-delay,
// 50 ms) each loop measures how long what it reads waited, and once requests
// have waited longer than that round after round, it answers the SHAKEs and
// CHATs that did "overloaded" at once (SHAKE_RESULT 2, CHAT_ACK 2), in the
// batched answer of a full ring (see Full rings). Those counts are in
// Stats.Shed, and in Stats.Overload with the full rings' ones. LOGIN and PING
// are never refused; nor are OPEN and SEND (frame.go's refuse says why).
//
// What is measured: the kernel's receive timestamp (SO_TIMESTAMPNS, read
// with recvmsg) of the newest byte of each read, against the clock after
// the read. It is the wait that grows under overload, exactly, per
// connection; for a connection with several requests queued it is the
// newest one's, so it errs towards serving. It costs a recvmsg instead of a
// read and a clock read, so a loop takes it only when a read may be near the
// target: while the shedder is not idle, after an epoll_wait that left ready
// connections behind, or after a cycle longer than half the target (loop.
// gateStamps argues why the other reads cannot be). A timestamped read and
// its clock read took 1,405 ns against a plain read's 1,167 (BenchmarkRead,
// medians of 5): +240 ns, 1.5 % of a SHAKE's 16 µs of server CPU, which the
// gate saves whenever the loop keeps up (Stats.Stamped counts the others).
// The kernel timestamps every packet it receives once any socket asks for
// it: one clock read per packet.
//
// The control law (shed.go), per loop: a round is over target when a read in
// it waited longer than ShedDelay. Rounds all over target for an interval
// (2 × ShedDelay) arm the shedder; armed, it refuses the reads that waited
// longer than ShedDelay and serves the fresher ones; rounds all under target
// for an interval disarm it. A burst that drains within the interval is
// served late rather than refused; a standing queue is cut back to the target
// and held there, so the answers served wait at most about ShedDelay in the
// kernel, and the refused ones not much longer.
//
// What it cannot do: a refusal costs the server nearly what an answer does
// (the read, a ring slot, the egress's write; only the stage's work is
// saved), so shedding holds the queue only while the server can answer
// every request, refused or not. Past that the reads fall behind whatever
// is refused. Measured with the load client on the same two cores: at
// 30,000 SHAKE/s over 19,000 connections nothing is refused; asked 120,000
// there, the load client sends ~67,000 and 44 % of them are refused, yet the
// latency is the load client's own lag; at a million connections the
// servers read 37,000 of the 41,700 a second sent and fall behind while
// refusing 43 %.
//
// Rejected:
//   - A fixed rate cap: right only on the machine and at the
//     connection count it was tuned for; capacity at a million connections
//     is half that at 19,000.
//   - The ring's queueing time (RecvNs to the egress): a ring holds at most a
//     few milliseconds of work, and the wait that grows is before the read.
//   - The loop's cycle time as the delay itself: it bounds the wait only when
//     epoll_wait left nothing ready behind; with more ready connections than
//     one epoll_wait returns, a connection waits an unknown number of cycles.
//     It serves as the gate of the timestamps instead.
//   - CoDel's own law (drop one, then the next after interval/√count): it
//     makes TCP senders slow down, but these clients send at their own rate;
//     at twice the capacity it would need millions of refusals to reach the
//     rate that holds the queue, which grows meanwhile.
//   - A refusal per sample over target with no arming (a deadline): a GC
//     pause or a descheduled loop at a load the server carries would refuse
//     requests a few milliseconds late that it could serve.
//   - The smallest sample of the interval (CoDel's standing-queue test) per
//     read: a connection with a second request queued reports the newer
//     one's short wait. At 19,000 connections and 60,000 SHAKE/s each sends
//     3 a second, so with 50 ms queued about one read in six has a second
//     request, and a run of samples all over target ends within a few reads,
//     long before an interval; the largest sample of a round is over target
//     in every round of a standing queue.
//   - Netpoll mode: the Go scheduler is its queue and it has no rounds; it
//     never sheds by delay, as it is kept for comparison.
//
// # The CHAT rate
//
// Options.ChatRate and ChatBurst (-chat-rate, -chat-burst) bound the CHATs
// of each connection with a token bucket kept in the connection itself
// (conn.Conn.ChatTAT, chatrate.go): a CHAT without a token is answered
// CHAT_ACK 3 in the batch of refusals and reaches no SET. Per connection, not
// per user, because a user has one connection at a time and the loop then
// needs no state beyond the connection it reads: a reconnect, which costs a
// LOGIN, starts with a full bucket. The recipient is protected apart from
// it, by its session (stages.Limits.ChatBacklog), whatever the senders.
//
// # Modes
//
// ModeNetpoll is a goroutine per connection on the standard net package,
// with the same frame handling (frame.go): the baseline for comparisons and
// the mode of systems without epoll. Options.Bare (the server's
// -pipeline=none) uses no rings: the loop answers every request itself,
// with every answer of one read in one write, as the stand-in for the cost of
// loopback TCP alone. It keeps no output queue: a client whose socket cannot
// take a round's answers in that one write is dropped (a benchmark mode).
//
// # Counters
//
// Each loop counts in plain fields and adds them once per round to its own
// padded shard of atomics; Ingress.Stats sums the shards. The admin layer
// calls Stats at scrape time.
package ingress
