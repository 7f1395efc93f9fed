// Package ingress is the read side of the server: it accepts connections,
// decodes their frames and publishes each as an event into the ring of the
// SET that owns its work. It is the conn.Owner of every connection it
// accepts.
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
//
// Each ready connection gets one read of at most Options.ReadBudget bytes
// (64 KiB) per round into the loop's single read buffer, after the partial
// frame it kept from the previous round. A connection with more to read is
// still readable, and level-triggered epoll reports it again next round, so
// a busy connection cannot starve the others. Every complete frame is decoded
// with proto.NextRequest and handled at once; a trailing partial frame is
// copied to c.In, a buffer borrowed from bytebufferpool and returned when the
// frame completes: an idle connection holds no buffer. Events carry RecvNs =
// the time of the read round that completed their frame.
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
// An ERROR the ingress writes or asks for (KFatal.Stamp) carries the stamp of
// the frame it answers when that frame decoded whole (ERROR 3 for a first
// frame other than LOGIN, ERROR 1 for a second LOGIN) and 0 otherwise (a
// violation can be certain after 2 bytes; timeouts and shutdown answer no
// frame). LOGIN_ACK 1 and 2 echo the LOGIN's stamp.
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
