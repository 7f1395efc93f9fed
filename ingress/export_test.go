package ingress

import "github.com/hongbao-io/hongbao/conn"

// TestConn drives the per-frame path of one logged-in connection without a
// socket: decode, then publish, as a loop does after a read.
type TestConn struct {
	p   proc
	ic  *iconn
	cnt counters
}

// NewTestConn returns a connection record of ing logged in as user.
func (ing *Ingress) NewTestConn(user uint32) *TestConn {
	tc := &TestConn{ic: ing.slab.get()}
	tc.p = ing.newProc(&tc.cnt, true)
	tc.ic.c.User = user
	if ing.o.Bus != nil {
		tc.ic.c.SET = int32(ing.o.Bus.SETOf(user))
	}
	return tc
}

// Conn is the connection the events name.
func (tc *TestConn) Conn() *conn.Conn { return &tc.ic.c }

// Consume handles the complete frames at the start of data and returns the
// bytes used and whether a full ring stopped it.
func (tc *TestConn) Consume(data []byte, now int64) (used int, stalled bool) {
	used, r := tc.p.consume(tc.ic, data, now)
	return used, r == resStall
}

// Out is what Bare mode answered in the last Consume.
func (tc *TestConn) Out() []byte { return tc.p.out }

// ResetOut empties the answers of Bare mode.
func (tc *TestConn) ResetOut() { tc.p.out = tc.p.out[:0] }

// Shed makes the frames of the next Consume arrive in a read the shedder
// refuses (or not).
func (tc *TestConn) Shed(on bool) { tc.p.shed = on }
