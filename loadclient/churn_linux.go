//go:build linux

package loadclient

import "math"

// Churn (-churn): users who close their connection on purpose and connect again at once.

// churnTries is how many random users a churn looks at for one that is logged in with
// nothing in flight; when none is, that churn is skipped.
const churnTries = 8

// churnDue closes the connections of the churns due by now and queues their users to
// connect again at once: a user who goes away and comes back, not an error. Only a logged-in
// connection with nothing in flight, nothing unwritten and no partial frame read goes, so no
// answer the server counted is ever unread and the reconciliation stays exact.
func (l *loop) churnDue() {
	// After a stall, the churns more than a second late are skipped: a user who would have
	// reconnected during it did not, rather than thousands reconnecting at once.
	if p := &l.churnP; p.step > 0 && float64(l.now)-p.next > 1e9 {
		p.next += math.Floor((float64(l.now)-p.next-1e9)/p.step+1) * p.step
	}
	for range sendBudget {
		if !l.churnP.due(l.now, l.endNs) {
			return
		}
		l.churnP.next += l.churnP.step
		for range churnTries {
			idx := uint32(l.rng.IntN(len(l.conns)))
			c := &l.conns[idx]
			if c.state != stReady || c.waiting() || c.out != nil || c.in != nil {
				continue
			}
			l.closeConn(c, &l.c.Lost) // nothing in flight: counts nothing
			l.setState(c, stIdle)
			c.fails = 0
			l.connQ = append(l.connQ, idx)
			l.c.Churned++
			break
		}
	}
}
