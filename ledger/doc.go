// Package ledger holds the money and traffic counters of the SETs: one Ledger
// per SET, whose groups of counters are each written by the one stage they
// are named after (session, shake, split, egress) and read at any time by
// the admin API, and Stats, their sum as GET /stats serves it, with the two
// invariants docs/PROTOCOL.md promises about it.
//
// It is a leaf: it imports nothing of hongbao, so that every stage and the
// server can share its types without importing one another. It holds
// counters only: it decides nothing, touches no socket and no ring.
package ledger
