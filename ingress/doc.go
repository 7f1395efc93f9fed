// Package ingress is the read side of the server: it accepts connections,
// decodes their frames and publishes each as an event into the ring of the
// SET that owns its work. It is the conn.Owner of every connection it
// accepts. It does not touch money or any stage's state, and once a
// connection is logged in it writes nothing to it: its refusals and ERRORs go
// to the SET's egress as events (bare mode, -pipeline=none, aside).
//
// The decisions that measurements settled are in docs/DESIGN.md under the
// titles these comments give in parentheses.
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
// find it from the *conn.Conn. An idle connection holds its slab record and
// nothing else on the Go heap, in chunks the GC scans as a few large
// objects; free records go on a mutex-guarded free list (Release runs on
// egress goroutines, once per connection).
//
// Every mode a loop can run in (Bare, Handoff, NetpollWait, NoYield,
// ShedDelay) is chosen once, when the loop is built, as function values and
// small types behind interfaces (loop_linux.go): nothing on the path of a
// frame, a read or a round tests an option.
//
// # Reading
//
// Each ready connection gets one read of at most Options.ReadBudget bytes
// (64 KiB) per round into the loop's single read buffer, after the partial
// frame it kept from the previous round. A connection with more to read is
// still readable, and level-triggered epoll reports it again next round, so
// a busy connection cannot starve the others. Every complete frame is
// decoded with proto.NextRequest and handled at once; a trailing partial
// frame is copied to c.In, a buffer borrowed from bytebufferpool and
// returned when the frame completes: an idle connection holds no buffer.
//
// Events carry RecvNs = the clock at the start of the chunk of runEvery
// ready descriptors in which the read that completed their frame was: the
// server's decode → write (hongbao_latency_seconds) counts the reads before
// it in its chunk, whose SETs run after them, but not those of earlier
// chunks, which it waited for in the kernel as it would in front of any
// server (docs/DESIGN.md, One clock read per chunk of reads).
//
// After a round with events the loop yields (runtime.Gosched) before it
// blocks again, so that the SET goroutines it woke run on its P at once: a
// thread blocked in a raw syscall keeps its P (docs/DESIGN.md, Epoll loops
// yield after a round). Not with Options.NoYield, for consumers that poll
// (go-disruptor's listeners, -pipeline=disruptor), which are always runnable
// and which a yield would queue the loop behind; nor in Bare mode, which
// wakes nothing. With the loops running the SETs themselves (below) a round
// seldom wakes any: what is left to yield to is a SET woken by another SET,
// a campaign or the ticker.
//
// # Running SETs
//
// A loop publishes a request without waking its SET (event.Bus.RunningBus)
// and remembers the SET; after every runEvery ready descriptors, and at the
// end of the round, it runs the batch of each SET it published into on its
// own goroutine (ring.Ring.Run): session, shake, split and egress, up to
// runLimit events, the answers written before it reads on. Only one
// goroutine runs a SET's stages at a time: a loop that finds the SET's
// goroutine (or another loop) running it leaves its events to that one,
// which re-checks for them when it lets go; what is past runLimit goes to
// the SET's goroutine. The ring still orders everything: every stage sees
// every event once, in sequence order, whoever runs it. Not with
// Options.Handoff (-handoff, for comparison), nor for SETs whose stages are
// not fused: there every publish wakes the SET's goroutine, which then waits
// on the loop's P behind the rest of its round (docs/DESIGN.md, The loops
// run their SETs' batches; A loop runs its SETs every 64 descriptors, 256
// events at most). A logged-in connection stays on the loop that accepted it
// (docs/DESIGN.md, No home loop per SET).
//
// # Blocking
//
// An idle loop blocks in a raw epoll_wait, which keeps its P until the
// runtime's sysmon retakes it. Options.NetpollWait (-loop-wait=netpoller)
// parks it in Go's netpoller on its epoll descriptor instead, holding no P
// (park_linux.go), at the cost of a second epoll_wait per idle round and a
// wake-up through the runtime's poller (docs/DESIGN.md, Idle loops block in
// epoll_wait).
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
// served, seconds late. So with Options.ShedDelay (the server's -shed-delay)
// each loop measures how long what it reads waited, and once requests have
// waited longer than that round after round, it answers the SHAKEs and CHATs
// that did "overloaded" at once (SHAKE_RESULT 2, CHAT_ACK 2), in the batched
// answer of a full ring (see Full rings). Those counts are in Stats.Shed,
// and in Stats.Overload with the full rings' ones. LOGIN and PING are never
// refused; nor are OPEN and SEND (frame.go's refuse says why). Netpoll and
// Bare never shed by delay.
//
// What is measured: the kernel's receive timestamp (SO_TIMESTAMPNS, read
// with recvmsg) of the newest byte of each read, against the clock after
// the read. It is the wait that grows under overload, exactly, per
// connection; for a connection with several requests queued it is the
// newest one's, so it errs towards serving. It costs a recvmsg instead of a
// read and a clock read, so a loop takes it only when a read may be near the
// target: while the shedder is not idle, after an epoll_wait that left ready
// connections behind, or after a cycle longer than half the target
// (delayShed.stamps argues why the other reads cannot be; Stats.Stamped
// counts the timestamped ones; docs/DESIGN.md, Timestamped reads only near
// the target). The kernel timestamps every packet it receives once any
// socket asks for it: one clock read per packet.
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
// every request, refused or not; past that the reads fall behind whatever is
// refused. The alternatives it was chosen over, and the runs that show its
// limit, are in docs/DESIGN.md (Shedding by delay).
//
// # The CHAT rate
//
// Options.ChatRate and ChatBurst (-chat-rate, -chat-burst) bound the CHATs
// of each connection with a token bucket kept in the connection itself
// (conn.Conn.ChatTAT, chatrate.go): a CHAT without a token is answered
// CHAT_ACK 3 in the batch of refusals and reaches no SET. Per connection, not
// per user, because a user has one connection at a time and the loop then
// needs no state beyond the connection it reads: a reconnect, which costs a
// LOGIN, starts with a full bucket (docs/DESIGN.md, The CHAT rate per
// connection). The recipient is protected apart from it, by its session
// (stages.Limits.ChatBacklog), whatever the senders.
//
// # Modes for comparison
//
// ModeNetpoll (compare_netpoll.go, compare_netpoll_conn.go) is a goroutine
// per connection on the standard net package, with the same frame handling
// (frame.go): the baseline for comparisons and the mode of systems without
// epoll (docs/DESIGN.md, Epoll loops, not a goroutine per connection).
// Options.Bare (the server's -pipeline=none, compare_bare.go) uses no rings:
// the loop answers every request itself, with every answer of one read in
// one write, as the stand-in for the cost of loopback TCP alone. It keeps no
// output queue: a client whose socket cannot take a read's answers in that
// one write is dropped.
//
// # Counters
//
// Each loop counts in plain fields and adds them once per round to its own
// padded shard of atomics; Ingress.Stats sums the shards. The admin layer
// calls Stats at scrape time.
package ingress
