// Package cluster makes several gateways (server processes) one service
// over NATS: with the journal on files, gateway I of N runs the SETs s with
// s mod N == I out of the cluster's -sets; with the journal on JetStream,
// the SETs whose last claim is its (jsjournal.Claims; package placement
// decides which to claim, follow and hand over, and holds each SET's state
// on the gateway). Every event for a SET run elsewhere crosses to its
// gateway (docs/PROTOCOL.md, Clusters); cluster keeps the crossings, the
// membership and the gateways' identities. It does not handle the business: it
// carries events between gateways, and the SETs' stages on either side apply
// them; it holds no money.
//
// The crossing is a stage of the pipeline, as the journal is: on each
// gateway, every other gateway is a link, a ring whose single stage (the
// forwarder) encodes the events published into it — by the ingress, the
// stages and the campaign runner, exactly as into a SET's ring — and sends
// each round's batch as one NATS message to that gateway, which publishes
// every event into the ring of the SET it is for. A money answer (an OPEN's
// share, an ENVELOPE push) leaves only once the journal of the gateway that
// made it has it on disk, as at the egress.
//
// Requests that cross (OPEN, CHAT) wait in the crossing table of the
// requester's gateway: the answer finds the connection there; a crossing not
// answered within the bound (-cluster-timeout) is answered "unavailable",
// and a share the envelope's gateway drew for an OPEN meanwhile stays its
// opener's, who learns it by sending the OPEN again ("already").
//
// Membership is announced on NATS: each gateway publishes a heartbeat with
// its node number, the cluster's shape (-nodes, -sets), its client and admin
// addresses; a gateway whose shape differs from the cluster's already there,
// or whose node number is taken, refuses to start. A gateway counts as up
// (gets users and crossings) only once it is ready: its SETs recovered and
// its subscription confirmed by NATS. One that shuts down says it is no
// longer ready, waits for its crossings' answers and answers the rest
// "unavailable".
package cluster
