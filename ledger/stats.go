package ledger

import (
	"errors"
	"fmt"
)

// Stats is the ledger of GET /stats: docs/PROTOCOL.md's fields, and more. Its JSON
// is a contract with the clients that reconcile against it. Each figure is a
// sum over the SETs of counters that one stage writes (Sum), except the
// connections and the overloaded requests, which the ingress counts and its
// owner adds.
type Stats struct {
	Connections int64  `json:"connections"`
	Logins      uint64 `json:"logins"`
	Shake       struct {
		Requests      uint64 `json:"requests"`
		Got           uint64 `json:"got"`
		GotAmount     uint64 `json:"got_amount"`
		Empty         uint64 `json:"empty"`
		Overload      uint64 `json:"overload"`
		Created       uint64 `json:"created"`
		CreatedAmount uint64 `json:"created_amount"`
		Pool          uint64 `json:"pool"`
		PoolAmount    uint64 `json:"pool_amount"`
		Returned      uint64 `json:"returned"` // answers that could not be written: envelopes back in the pool
	} `json:"shake"`
	Envelopes struct {
		Created           uint64 `json:"created"`
		CreatedAmount     uint64 `json:"created_amount"`
		Opened            uint64 `json:"opened"`
		OpenedAmount      uint64 `json:"opened_amount"`
		OutstandingAmount uint64 `json:"outstanding_amount"` // not opened: live_amount + refunded_amount
		LiveAmount        uint64 `json:"live_amount"`        // still openable
		Refunded          uint64 `json:"refunded"`           // envelopes expired with shares left
		RefundedAmount    uint64 `json:"refunded_amount"`
		Overload          uint64 `json:"overload"` // OPEN and SEND answered overloaded
		SendInvalid       uint64 `json:"send_invalid"`
		SystemSkipped     uint64 `json:"system_skipped"` // campaign envelopes not created: a SET lacked online users for them, or was at its budget
		Live              uint64 `json:"live"`           // gauge: envelopes not fully opened and not expired: what -max-envelopes caps
		Held              int64  `json:"held"`           // gauge: envelopes in memory: live, or fully opened and kept for -opened-retention
		SendLimited       uint64 `json:"send_limited"`   // SENDs answered 3: send_limited_by's sum
		SendLimitedBy     struct {
			Rate    uint64 `json:"rate"`     // over the sender's -send-rate / -send-burst
			LiveCap uint64 `json:"live_cap"` // the sender at -max-live-per-user
			Budget  uint64 `json:"budget"`   // its SET at its share of -max-envelopes
		} `json:"send_limited_by"`
		SystemOverBudget uint64 `json:"system_over_budget"` // of system_skipped: for the budget
		Evicted          uint64 `json:"evicted"`            // fully opened envelopes forgotten before -opened-retention for room
		Senders          int64  `json:"senders"`            // gauge: users with per-user SEND state
		Pending          struct {
			Waiting     int64  `json:"waiting"`     // gauge: ENVELOPE pushes kept for recipients who were offline
			Users       int64  `json:"users"`       // gauge: users they are kept for
			Dropped     uint64 `json:"dropped"`     // dropped for room (per user, the newest are kept)
			Rechecked   uint64 `json:"rechecked"`   // sent to their envelope at the user's login
			Repushed    uint64 `json:"repushed"`    // of those, pushed: the user could still open it
			Stale       uint64 `json:"stale"`       // of those, not pushed: expired, fully opened or opened by the user
			Undelivered uint64 `json:"undelivered"` // live pushes whose connection went before they were written: kept
		} `json:"pending_pushes"`
	} `json:"envelopes"`
	Chat struct {
		Received  uint64 `json:"received"`  // reached the recipient's SET: delivered + offline + dropped
		Delivered uint64 `json:"delivered"` // CHAT_ACK 0
		Offline   uint64 `json:"offline"`   // CHAT_ACK 1
		Dropped   uint64 `json:"dropped"`   // CHAT_ACK 2: the recipient's backlog was full
		Overload  uint64 `json:"overload"`  // CHAT_ACK 2: refused at the door (a full ring, or by delay)
		Limited   uint64 `json:"limited"`   // CHAT_ACK 3: over the sender's CHAT rate, refused at the door
	} `json:"chat"`
}

// Sum adds up the SETs' counters.
func Sum(ls []*Ledger) Stats {
	var st Stats
	for _, l := range ls {
		st.Logins += l.Session.Logins.Load()
		st.Shake.Requests += l.Shake.Requests.Load()
		st.Shake.Got += l.Egress.Got.Load()
		st.Shake.GotAmount += l.Egress.GotAmount.Load()
		st.Shake.Empty += l.Shake.Empty.Load()
		st.Shake.Created += l.Shake.Created.Load()
		st.Shake.CreatedAmount += l.Shake.CreatedAmount.Load()
		st.Shake.Pool += l.Shake.Pool.Load()
		st.Shake.PoolAmount += l.Shake.PoolAmount.Load()
		st.Shake.Returned += l.Shake.Returned.Load()
		e := &l.Split
		st.Envelopes.Created += e.Created.Load()
		st.Envelopes.CreatedAmount += e.CreatedAmount.Load()
		st.Envelopes.Opened += e.Opened.Load()
		st.Envelopes.OpenedAmount += e.OpenedAmount.Load()
		st.Envelopes.LiveAmount += e.LiveAmount.Load()
		st.Envelopes.Refunded += e.Refunded.Load()
		st.Envelopes.RefundedAmount += e.RefundedAmount.Load()
		st.Envelopes.SendInvalid += e.SendInvalid.Load()
		st.Envelopes.SystemSkipped += l.Session.SystemPicksFailed.Load() + e.SystemOverBudget.Load()
		st.Envelopes.Live += e.Live.Load()
		st.Envelopes.Held += e.Held.Load()
		st.Envelopes.SendLimitedBy.Rate += e.SendLimitedRate.Load()
		st.Envelopes.SendLimitedBy.LiveCap += e.SendLimitedLive.Load()
		st.Envelopes.SendLimitedBy.Budget += e.SendLimitedBudget.Load()
		st.Envelopes.SystemOverBudget += e.SystemOverBudget.Load()
		st.Envelopes.Evicted += e.Evicted.Load()
		st.Envelopes.Senders += e.Senders.Load()
		pp, ss := &st.Envelopes.Pending, &l.Session
		pp.Waiting += ss.PendingPushes.Load()
		pp.Users += ss.PendingUsers.Load()
		pp.Dropped += ss.PendingDropped.Load()
		pp.Rechecked += ss.PendingRechecked.Load()
		pp.Repushed += e.Repushed.Load()
		pp.Stale += e.RepushStale.Load()
		pp.Undelivered += ss.PushesUndelivered.Load()
		st.Chat.Received += l.Session.ChatReceived.Load()
		st.Chat.Delivered += l.Session.ChatDelivered.Load()
		st.Chat.Offline += l.Session.ChatOffline.Load()
		st.Chat.Dropped += l.Session.ChatDropped.Load()
	}
	st.Envelopes.OutstandingAmount = st.Envelopes.LiveAmount + st.Envelopes.RefundedAmount
	by := st.Envelopes.SendLimitedBy
	st.Envelopes.SendLimited = by.Rate + by.LiveCap + by.Budget
	return st
}

// Check reports every ledger invariant that does not hold (CheckShake,
// CheckEnvelopes), or nil. The counters are read one by one while the SETs
// run, so the invariants hold exactly only once no request is in flight.
func (st *Stats) Check() error { return errors.Join(st.CheckShake(), st.CheckEnvelopes()) }

// CheckShake reports whether every shake envelope created is either got or
// still in a pool: created_amount == got_amount + pool_amount, and the same
// for the counts.
func (st *Stats) CheckShake() error {
	if s := st.Shake; s.CreatedAmount != s.GotAmount+s.PoolAmount || s.Created != s.Got+s.Pool {
		return fmt.Errorf("shake ledger: created %d (%d fen) ≠ got %d (%d fen) + pool %d (%d fen)",
			s.Created, s.CreatedAmount, s.Got, s.GotAmount, s.Pool, s.PoolAmount)
	}
	return nil
}

// CheckEnvelopes reports whether every fen of the group envelopes created is
// either opened or outstanding: created_amount == opened_amount +
// outstanding_amount.
func (st *Stats) CheckEnvelopes() error {
	if e := st.Envelopes; e.CreatedAmount != e.OpenedAmount+e.OutstandingAmount {
		return fmt.Errorf("envelope ledger: created_amount %d ≠ opened_amount %d + outstanding_amount %d",
			e.CreatedAmount, e.OpenedAmount, e.OutstandingAmount)
	}
	return nil
}
