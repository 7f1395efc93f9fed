package loadclient

import "github.com/hongbao-io/hongbao/proto"

// Request kinds: the requests the client sends and times, and the index of their counters and
// histograms.
const (
	reqLogin = iota
	reqShake
	reqOpen
	reqSend
	reqChat
	nReq

	histDeliver = nReq // CHAT_DELIVER: from the CHAT's stamp to its delivery
	nHist       = nReq + 1
)

var reqNames = [nHist]string{"LOGIN", "SHAKE", "OPEN", "SEND", "CHAT", "CHAT_DELIVER"}

// answerOf maps an answer type to the request kind it answers; -1 for the others.
func answerOf(t proto.Type) int {
	switch t {
	case proto.LoginAck:
		return reqLogin
	case proto.ShakeResult:
		return reqShake
	case proto.OpenResult:
		return reqOpen
	case proto.SendAck:
		return reqSend
	case proto.ChatAck:
		return reqChat
	}
	return -1
}

// maxStatus bounds the status codes counted per kind: OPEN_RESULT, the richest, has 0..5.
const maxStatus = 8

// overloadStatus is the "overloaded, try later" status of each kind; 0xff: none.
var overloadStatus = [nReq]uint8{0xff, proto.ShakeOverloaded, proto.OpenOverloaded, proto.SendOverloaded, proto.ChatOverloaded}

// Error classes.
const (
	errConnect  = iota // connect refused, unreachable, timed out
	errReset           // an established connection dropped: EOF, reset, ERROR 8, ERROR 9
	errTimeout         // no answer (or no login) within -timeout; requests unanswered at the end
	errProtocol        // a frame that breaks the protocol, an unsolicited answer, a login refused, ERROR 1-5
	errOverload        // an overloaded status, ERROR 6
	nErr
)

var errNames = [nErr]string{"connect", "reset", "timeout", "protocol", "overload"}

// Push kinds.
const (
	pushEnvelope = iota
	pushChat
	nPush
)

var pushNames = [nPush]string{"ENVELOPE", "CHAT_DELIVER"}

// counters are one loop's figures, or a sum of them. The loop that owns one writes it
// without synchronization and publishes copies (loop.publish); sums are made from copies.
// Fields are exported for the JSON lines between a -procs child and its parent.
type counters struct {
	Up         int64 // connections logged in now
	Connecting int64 // connections connecting or logging in now
	Connects   uint64
	Users      int64 // users this process holds

	Sent       [nReq]uint64
	Status     [nReq][maxStatus]uint64 // answers by status
	Lost       [nReq]uint64            // in flight on a connection that dropped (an OPEN is sent again: opens_linux.go)
	NotDone    [nReq]uint64            // in flight at ERROR 9: the gateway answered all it took before it, so these were not carried out; OPEN aside, counted lost: its share may be drawn
	Unanswered [nReq]uint64            // still in flight when the run closed
	Skipped    uint64                  // due while the user was not logged in: not sent
	Churned    uint64                  // connections closed on purpose by -churn, to reconnect
	Redirected uint64                  // LOGIN_ACK 3 followed: reconnects to the gateway it named
	Moved      uint64                  // ERROR 9: the gateway no longer served the user's SET
	NoOwner    uint64                  // LOGIN_ACK 3 naming no gateway: the SET between two owners (retried)
	Outages    uint64                  // logged-in connections that failed (not churned)
	Reconnects uint64                  // logins that ended an outage
	Backlog    uint64                  // dropped: the connection's unwritten output was over its limit
	Pushes     [nPush]uint64

	// OutageMaxNs is the longest a user was without a connection: from its logged-in
	// connection's failure to its next login, or to the end of the sends. A maximum: add
	// keeps the larger.
	OutageMaxNs int64

	// The end of the run (drainLocal): a loop told to hold opens no more pushes.
	Unopened uint64 // ENVELOPE pushes that came while holding: not opened, no money
	Holding  int64  // loops holding whose published copy is from after the hold

	// OPENs sent again (opens_linux.go): each ENVELOPE push opened is an open that ends with
	// its OPEN's final answer, status 0 to 4.
	Repeated      uint64 // ENVELOPE pushes of an envelope whose open had no final answer yet: not opened again
	Resent        uint64 // OPENs sent again (in Sent[reqOpen]): answered 5, or in flight when their connection ended
	Learned       uint64 // shares learned by a repeated OPEN: a re-sent OPEN answered 1
	LearnedAmount uint64 // Σ their amounts (in OpenAmount)
	OpenPending   int64  // opens without a final answer now: an OPEN in flight or to be sent again; after the run, unresolved

	// SHAKEs sent again with their request id (resend_linux.go).
	ShakeResent     uint64 // in Sent[reqShake]: in flight when their connection ended
	ShakePending    int64  // waiting for their user's next login now
	ShakeUnresolved uint64 // never sent again: the drain ended first, or they had left the FIFO

	ShakeAmount uint64 // Σ SHAKE_RESULT status 1 amounts
	OpenAmount  uint64 // Σ OPEN_RESULT status 0 amounts and the shares learned by a repeated OPEN: the OPEN money told
	Errors      [nErr]uint64

	ConnectFailures connFailures // why connects and logins failed, by kind
}

// add adds o to c.
func (c *counters) add(o *counters) {
	c.Up += o.Up
	c.Connecting += o.Connecting
	c.Connects += o.Connects
	c.Users += o.Users
	for r := range nReq {
		c.Sent[r] += o.Sent[r]
		c.Lost[r] += o.Lost[r]
		c.NotDone[r] += o.NotDone[r]
		c.Unanswered[r] += o.Unanswered[r]
		for s := range maxStatus {
			c.Status[r][s] += o.Status[r][s]
		}
	}
	c.Skipped += o.Skipped
	c.Churned += o.Churned
	c.Redirected += o.Redirected
	c.Moved += o.Moved
	c.NoOwner += o.NoOwner
	c.Outages += o.Outages
	c.Reconnects += o.Reconnects
	c.OutageMaxNs = max(c.OutageMaxNs, o.OutageMaxNs)
	c.Backlog += o.Backlog
	for p := range nPush {
		c.Pushes[p] += o.Pushes[p]
	}
	c.Unopened += o.Unopened
	c.Holding += o.Holding
	c.Repeated += o.Repeated
	c.Resent += o.Resent
	c.Learned += o.Learned
	c.LearnedAmount += o.LearnedAmount
	c.OpenPending += o.OpenPending
	c.ShakeResent += o.ShakeResent
	c.ShakePending += o.ShakePending
	c.ShakeUnresolved += o.ShakeUnresolved
	c.ShakeAmount += o.ShakeAmount
	c.OpenAmount += o.OpenAmount
	for e := range nErr {
		c.Errors[e] += o.Errors[e]
	}
	c.ConnectFailures.add(&o.ConnectFailures)
}

// answered returns the answers of kind r.
func (c *counters) answered(r int) uint64 {
	var n uint64
	for _, v := range c.Status[r] {
		n += v
	}
	return n
}

// inflight returns the requests of kind r sent and neither answered nor lost.
func (c *counters) inflight(r int) int64 {
	return int64(c.Sent[r]) - int64(c.answered(r)) - int64(c.Lost[r]) - int64(c.NotDone[r]) - int64(c.Unanswered[r])
}

// inflightAll returns the requests in flight of every kind.
func (c *counters) inflightAll() int64 {
	var n int64
	for r := range nReq {
		n += c.inflight(r)
	}
	return n
}

// failures returns the errors that make a run fail: all but overload, a legitimate answer,
// and how a cluster moves a SET — ERROR 9 (counted as resets) and LOGIN_ACK 3 naming no
// gateway yet (counted as connect errors), both followed by a login elsewhere or later.
func (c *counters) failures() uint64 {
	return c.Errors[errConnect] + c.Errors[errReset] + c.Errors[errTimeout] + c.Errors[errProtocol] - c.Moved - c.NoOwner
}
