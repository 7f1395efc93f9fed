// Package replicated runs a gateway's part in the replicated SETs
// (-journal jetstream): every SET's journal is its subjects of one
// JetStream stream (package jsjournal), a subject per gateway, and its
// owner the last claim in it (jsjournal.Claims). Every gateway builds every
// SET and runs those it claimed. A gateway not heard from for -lease loses
// its SETs: each survivor claims its even share of them (epoch + 1),
// appending its claim after the SET's last message — after which the old
// owner's next append is refused — brings the SET up to the claim (from its
// standby, or from its snapshot and the records after it), and serves it.
//
// It is the driver of package placement's state machine: it steps it with
// what happens — the claims' ticks, the claims heard, the journal's fenced
// or failed rounds, standbys started, moves asked for by the admin API or
// by another gateway — and carries out what the machine answers with
// JetStream (sets.go: claims and takes), the SETs' rings and the bus
// (move.go: moves, standby.go: standbys) and NATS itself (liveness.go: a
// gateway that cannot show NATS carries for it fences itself). The server
// opens it, hands it its SETs, bus, journal and cluster node (Host), and
// starts it once it serves.
//
// A gateway that loses a SET it runs (its append refused, its claim
// superseded, a round that failed) stops: ERROR 9 to its clients, exit
// status 3 (server.ExitLost). Its SETs' in-memory state may hold changes
// whose records never became durable, so it never serves them again; a new
// process starts from what JetStream holds (docs/DESIGN.md, The lease).
package replicated
