//go:build linux

package loadclient

import (
	"math"
	"math/rand/v2"

	"github.com/hongbao-io/hongbao/proto"
)

// Sending on schedule: the loop's share of the global SHAKE schedule, the pacers that space
// SENDs, CHATs and churns evenly, and the choice of random users and recipients.

// sender is what a loop sends by: its Schedule of SHAKEs, with the send Next returned that is
// not due yet, and the pacers of the other kinds.
type sender struct {
	sched    *Schedule
	pendUser uint32 // the send Next returned and that is not due yet
	pendAt   int64
	havePend bool
	sendP    pacer
	chatP    pacer
	churnP   pacer
	rcpt     []uint32 // the recipients of the SEND being built
}

// pacer spaces sends evenly: the next is due at next ns; step 0 is off.
type pacer struct{ next, step float64 }

func (p *pacer) due(now, end int64) bool {
	return p.step > 0 && p.next <= float64(now) && p.next < float64(end)
}

// wake returns when the next send is due, math.MaxInt64 when none is due before end.
func (p *pacer) wake(end int64) int64 {
	if p.step == 0 || p.next >= float64(end) {
		return math.MaxInt64
	}
	return int64(p.next)
}

// newSender builds the schedule of users r with the plan's rate changes, and the pacers of
// r's share of the run's SEND, CHAT and churn rates, all at one random phase drawn from rng.
func newSender(plan *runPlan, r Range, rng *rand.Rand) (sender, error) {
	cfg := plan.cfg
	var s sender
	var err error
	if s.sched, err = NewSchedule(cfg.TotalUsers, r.First, r.Last); err != nil {
		return s, err
	}
	for _, ch := range plan.changes {
		if _, err := s.sched.SetRate(ch.QPS, ch.AtNs); err != nil {
			return s, err
		}
	}
	share := float64(r.Len()) / float64(cfg.Users.Len()) // this loop's part of the run's rates
	phase := rng.Float64()
	paced := func(rate float64) pacer {
		if rate <= 0 {
			return pacer{}
		}
		step := 1e9 / (rate * share)
		return pacer{float64(plan.startNs) + phase*step, step}
	}
	s.sendP, s.chatP, s.churnP = paced(cfg.SendRate), paced(cfg.ChatRate), paced(cfg.ChurnRate)
	return s, nil
}

// sendDue sends every scheduled SHAKE, SEND and CHAT due by now, within the round's budget.
// A user who is not logged in skips its turn: the schedule never waits.
func (l *loop) sendDue() {
	for range sendBudget {
		if !l.havePend {
			u, at, ok := l.sched.Next()
			if !ok {
				break
			}
			l.pendUser, l.pendAt, l.havePend = u, at, true
		}
		if l.pendAt > l.now || l.pendAt >= l.endNs {
			break
		}
		l.havePend = false
		idx := l.pendUser - l.first
		c := &l.conns[idx]
		if c.state != stReady {
			l.c.Skipped++
			continue
		}
		if b := l.outBuf(c, idx); b != nil {
			*b = proto.AppendShakeID(*b, uint64(l.pendAt), l.resend.shakeID(l.pendAt))
			l.sent(c, reqShake)
			l.sentShake(idx, l.pendAt)
		}
	}
	l.sendPaced(&l.sendP, reqSend)
	l.sendPaced(&l.chatP, reqChat)
}

// sendPaced sends the requests of kind r (reqSend or reqChat) that pacer p has due, each
// from a random user of this loop.
func (l *loop) sendPaced(p *pacer, r int) {
	for range sendBudget {
		c, idx, stamp, more := l.randomDue(p)
		if !more {
			break
		}
		if c == nil {
			continue
		}
		var to uint32
		if r == reqSend {
			l.pickRecipients(c.user)
		} else {
			to = l.randomUser(c.user)
		}
		if b := l.outBuf(c, idx); b != nil {
			if r == reqSend {
				*b = proto.AppendSend(*b, stamp, l.plan.cfg.SendTotal, l.rcpt)
			} else {
				*b = proto.AppendChat(*b, stamp, to, l.plan.chatText)
			}
			l.sent(c, r)
		}
	}
}

// randomDue takes the next due send of pacer p for a random user of this
// loop. more is false when nothing is due; c is nil when the user picked is
// not logged in (the send is counted as skipped, never delayed).
func (l *loop) randomDue(p *pacer) (c *uconn, idx uint32, stamp uint64, more bool) {
	if !p.due(l.now, l.endNs) {
		return nil, 0, 0, false
	}
	stamp = uint64(p.next)
	p.next += p.step
	idx = uint32(l.rng.IntN(len(l.conns)))
	if c = &l.conns[idx]; c.state != stReady {
		l.c.Skipped++
		return nil, idx, stamp, true
	}
	return c, idx, stamp, true
}

// randomUser returns a user of the run other than not.
func (l *loop) randomUser(not uint32) uint32 {
	n := uint32(l.runUs.Len())
	u := l.runUs.First + l.rng.Uint32N(n-1)
	if u >= not {
		u++ // skip not: uniform over the other n−1
	}
	return u
}

// pickRecipients fills l.rcpt with distinct random users of the run other than sender.
func (l *loop) pickRecipients(sender uint32) {
	l.rcpt = l.rcpt[:0]
	for len(l.rcpt) < l.plan.cfg.SendRecipients {
		u := l.randomUser(sender)
		dup := false
		for _, r := range l.rcpt {
			dup = dup || r == u
		}
		if !dup {
			l.rcpt = append(l.rcpt, u)
		}
	}
}
