// Package loadclient is the hongbao load generator: many users, each on its own TCP
// connection, sending on an exact open-loop schedule, and a reconciliation of what they got
// with the server's ledger. cmd/loadclient is its command line; Run is the whole of it.
//
// # The journey of a SHAKE
//
// Schedule (schedule.go) says which user sends when: the global schedule over users 1..N,
// of which a process owns a contiguous range. The process splits its range over its event
// loops (loop_linux.go), each with its own Schedule over its own users, so the loops
// together send exactly the process's share and the processes together exactly -qps. A loop
// sleeps in epoll_pwait2 until the next due send (ns timeout: epoll_wait's ms would add up
// to 1 ms to every latency), appends a SHAKE stamped with its scheduled time to the user's
// output, and after the round writes each connection's output with one write. A user not
// logged in skips its turn (counted): a send is never delayed. The answer's stamp gives the
// latency, now − scheduled time, so a stall anywhere, the client's included, shows in it
// (no coordinated omission). An ENVELOPE push is opened at once with an OPEN, sent again
// until an answer settles its share.
//
// # Opens
//
// A share, once drawn for a user, is the user's, and a repeated OPEN answers 1 with it. So a
// push opened is an open that lasts until its OPEN gets a final answer, status 0 to 4
// (opens_linux.go): an OPEN answered 5 (overloaded; in a cluster also "not answered within
// -cluster-timeout", a share may be drawn) is sent again 50 to 100 ms later, and one in flight
// when its connection ended, whatever the way, once the user has logged in again. A re-sent
// OPEN answered 1 tells the share an earlier OPEN drew: money told, counted once (learned); a
// first OPEN answered 1 counts nothing. A push of an envelope whose open is under way is not
// opened again. The opens live in the loop, in a map from a connection's index to the few
// envelopes of its user, not in the connections.
//
// # Ownership
//
// A loop owns its connections, counters and histograms and touches them without locks. It
// publishes copies every 100 ms on the wall clock's grid (so on every whole second) under
// its mutex; the reporter polls them a little after each second for the live line, the
// timeline and /metrics, and takes the loops' own figures only after they have returned.
// Commands (a rate change, end, stop) go the other way under the same mutex, with an
// eventfd to wake the loop.
//
// # The end of a run
//
// Before the first connection the process reads the server's /stats (or /cluster/stats, when
// GET /cluster lists several gateways): the baseline, so that money the server held before
// the run (earlier runs, a restart on the same -data) is not taken for this run's. At the end
// the loops stop sending but keep reading and opening pushes until nothing but OPENs has been
// in flight for 300 ms. Then they hold: a push that comes later, as a send campaign's do
// without end, is counted and not opened, for an OPEN would move money while the figures are
// read. The opens under way go on, holding or not, for they settle money already drawn: their
// OPENs are sent again, and a user with one connects again though the sends are over. Once no
// open is under way and nothing has been in flight for 300 ms more (or -grace runs out), the
// process reads the figures again and compares their change with its own, measures its memory
// with the connections still up, and only then closes them: answers that were in flight count
// as unanswered (timeouts), and a connection that dropped counts what it had in flight as lost.
// Opens the grace left without a final answer are sent no more and reported as unresolved,
// and a strict mismatch names them: each may hold a share drawn and never told. Strict is exact when the
// run is the server's only client while it runs.
//
// -reconcile at-least is for a server killed and restarted during the run: its users
// reconnect after the backoff and go on, an answer cut off by the crash counts as lost (never
// as money; an OPEN cut off is sent again, and the share it learns is money told), the figures
// told must each be at most the server's change since the baseline (the difference is what the
// server made durable but never told; a restarted server recovers the baseline's money from
// its journal), both ledger invariants must hold exactly, and refused connects and resets do
// not fail the run.
//
// # Clusters
//
// A gateway that does not own a user answers its LOGIN with LOGIN_ACK 3 and the address of
// the one that does (gateway_linux.go). The user connects there at once, counted as
// redirected; a loop keeps the addresses in a table of at most 255 and a connection one
// byte, its index (0: a -server address). LOGIN_ACK 3 with no usable address is a connect
// failure, "wrong gateway, owner unknown", retried after the backoff.
//
// SETs that fail over move users between gateways: the gateway that lost the user's SET
// sends ERROR 9 (moved), one that died resets or refuses, one paused leaves requests
// unanswered past -timeout. Whatever the failure, the connection's requests in flight count
// as lost (never answered later: the next connection starts with none; at ERROR 9 as moved,
// not carried out, but for OPENs, whose envelope's SET may have drawn a share), and the user
// reconnects after the backoff with jitter (uconn_linux.go): from a gateway it was sent to,
// back to its -server address, which names the owner of the moment; from a -server address,
// to the next in turn (uconn.srv), for a dead gateway's refuses for good. Each logged-in
// connection that fails is an outage until the user's next login, a reconnect; the report
// gives both counts, the moves, and the longest outage. Its OPENs that were in flight are
// sent again after its next login, wherever LOGIN_ACK 3 sent it, as are OPENs answered 5 by a
// gateway whose crossing to the envelope's gateway timed out. The reconciliation reads the
// first -admin URL that answers: given several gateways', it outlives any one of them.
//
// # -procs
//
// A parent re-executes its binary as N children (procs.go), each with a contiguous share of
// the users, all with the same start and plan, and aggregates their JSON lines.
//
// Designs rejected: a goroutine per connection (8 KiB of stack each, 160 MB for 20,000
// users, where a loop's connection is 48 bytes); a shared schedule feeding the loops through
// a queue (a hand-off per send, and the loops would contend); one write per request instead
// of per connection per round (more syscalls than the server under test makes); the opens of
// a user in its connection (a field for every user, where few have an open under way).
package loadclient
