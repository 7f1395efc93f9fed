// Package placement is the SET's life in a cluster whose journal is on
// JetStream: who owns each SET and at which epoch, what this gateway does
// with it — a standby, a take, serving, a move out or in — and the
// decisions that change it: the claims of SETs whose owner is gone, the
// standbys, the moves that even the SETs out over the gateways.
//
// Its core is Machine, a state machine stepped by events (a tick, a claim
// heard, a claim appended, a round fenced, a follow caught up, a move asked
// for) that answers what to do (Ready: claim, follow, drop a follow, move,
// route, stop), with no goroutine, clock, NATS connection or socket of its
// own, as etcd raft's Node/Ready. Each SET's state is one value (SET), and
// every transition is in machine.go. The driver — package replicated —
// carries out Ready with JetStream, the bus and the journal, and
// steps the machine with what came of it.
//
// assign.go decides, from every SET's owner of the moment and the gateways
// heard, which SETs a gateway claims, follows and hands over: every gateway
// with the same view computes the same answer, and the claims' conditional
// appends settle the moments when views differ.
//
// The move's protocol, step by step, is in package replicated's move.go; the
// claims themselves, and what fences a former owner, in package jsjournal;
// docs/CLUSTER.md tells an operator what each state means.
package placement
