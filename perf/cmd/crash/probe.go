package main

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"hongbao/client/wire"
	"hongbao/proto"
)

// probe is a few users of the tool's own, each on one connection, that SHAKE
// one request at a time, now and then SEND a group envelope and OPEN every
// envelope they are pushed, recording every envelope id they are handed, the
// shares they drew and the money they are told. Every request carries a
// request id, and the one in flight when a connection ended is sent again
// with it after the reconnect: the money the server counted is then the
// money the probe was told.
type probe struct {
	mu       sync.Mutex
	shakeIDs map[uint64]bool  // SHAKE_RESULT 1
	groupIDs map[uint64]bool  // SEND_ACK 0
	opened   map[drawn]uint32 // OPEN_RESULT 0: the share of a user in an envelope
	shakeFen uint64           // Σ SHAKE_RESULT 1 amounts
	openFen  uint64           // Σ OPEN_RESULT 0 amounts
	twice    []uint64         // ids handed out twice, shares drawn twice
	reopened int              // re-OPENs after a reconnect answered 1 with the same share
	badOpen  []string         // re-OPENs answered otherwise
	errs     []error          // anything but the end of the connection
	killed   atomic.Bool      // the server is being killed: a connection's end is expected
	reqs     atomic.Uint32    // request ids given
	resent   atomic.Int64     // requests sent again with their id after a reconnect
}

// request is a probe user's request: what it asks and its request id.
type request struct {
	typ proto.Type
	env uint64 // OPEN
	id  uint64
}

// frame appends r with stamp, to recipient for a SEND.
func (r request) frame(b []byte, stamp uint64, recipient uint32) []byte {
	switch r.typ {
	case proto.Open:
		return proto.AppendOpenID(b, stamp, r.env, r.id)
	case proto.Send:
		return proto.AppendSendID(b, stamp, 30, []uint32{recipient}, r.id)
	}
	return proto.AppendShakeID(b, stamp, r.id)
}

func newProbe() *probe {
	return &probe{shakeIDs: map[uint64]bool{}, groupIDs: map[uint64]bool{}, opened: map[drawn]uint32{}}
}

// drawn is a share: a user's in an envelope.
type drawn struct {
	user uint32
	env  uint64
}

// told returns the money the probe was told so far: SHAKE and OPEN.
func (p *probe) told() (shake, open uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shakeFen, p.openFen
}

// reopenMax bounds the envelopes a probe user OPENs again after each
// reconnect: its latest ones.
const reopenMax = 20

// run drives users until stop is closed or their connections end (the
// server killed), and returns once every one has stopped. With reconnect a
// user whose connection ended connects again (every 100 ms until it can)
// until stop is closed, and first OPENs again the latest envelopes it opened.
func (p *probe) run(addr string, users, recipients []uint32, stop <-chan struct{}, reconnect bool) {
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recipient := recipients[0]
			if recipient == u {
				recipient = recipients[1%len(recipients)]
			}
			var mine []uint64     // the envelopes u opened, oldest first
			var inFlight *request // the request a connection's end left unanswered
			for {
				err := p.user(addr, u, recipient, stop, &mine, &inFlight)
				if !reconnect {
					if err != nil {
						p.mu.Lock()
						p.errs = append(p.errs, fmt.Errorf("probe user %d: %w", u, err))
						p.mu.Unlock()
					}
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}

func (p *probe) user(addr string, user, recipient uint32, stop <-chan struct{}, mine *[]uint64, inFlight **request) error {
	c, err := wire.DialLogin(addr, user)
	if err != nil {
		return err
	}
	defer c.Close()
	go func() { <-stop; c.SetDeadline(time.Now().Add(5 * time.Second)) }() // the request in flight is answered first
	var out []byte
	again := (*mine)[max(0, len(*mine)-reopenMax):] // OPENed before: answered 1 with the same share
	var opening uint64                              // the envelope of the OPEN in flight
	for i := uint64(2); ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		opening = 0
		var r request
		switch {
		case *inFlight != nil: // sent again with its id: answered as it was, if it was
			r = **inFlight
			p.resent.Add(1)
		case len(again) > 0:
			r.typ, r.env, again = proto.Open, again[0], again[1:]
		case len(c.Pushed) > 0:
			r.typ, r.env, c.Pushed = proto.Open, c.Pushed[0], c.Pushed[1:]
		case i%50 == 0:
			r.typ = proto.Send
		default:
			r.typ = proto.Shake
		}
		if r.id == 0 {
			r.id = proto.NewRequestID(time.Now().Unix(), p.reqs.Add(1))
		}
		opening = r.env
		*inFlight = &r
		out = r.frame(out[:0], i, recipient)
		if _, err := c.Write(out); err != nil {
			return p.ended(err, stop)
		}
		f, err := c.Answer(i, 30*time.Second)
		if err != nil {
			return p.ended(err, stop)
		}
		*inFlight = nil
		p.mu.Lock()
		switch f.Type {
		case proto.ShakeResult:
			if st, env, amount := f.ShakeResult(); st == proto.ShakeGot {
				if p.shakeIDs[env] {
					p.twice = append(p.twice, env)
				}
				p.shakeIDs[env] = true
				p.shakeFen += uint64(amount)
			}
		case proto.OpenResult:
			p.opening(user, opening, f, mine)
		case proto.SendAck:
			if st, env := f.SendAck(); st == proto.SendOK {
				if p.groupIDs[env] {
					p.twice = append(p.twice, env)
				}
				p.groupIDs[env] = true
			}
		}
		p.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// opening records the answer to an OPEN of env: a share drawn (never twice
// for one envelope), or a repeated OPEN of one drawn before, which must
// answer 1 with the same share. Called with p.mu held.
func (p *probe) opening(user uint32, env uint64, f proto.Frame, mine *[]uint64) {
	st, _, amount := f.OpenResult()
	was, before := p.opened[drawn{user, env}]
	switch {
	case st == proto.OpenOK && before:
		p.twice = append(p.twice, env)
	case st == proto.OpenOK:
		p.opened[drawn{user, env}] = amount
		p.openFen += uint64(amount)
		*mine = append(*mine, env)
	case before && st == proto.OpenAlready && amount == was:
		p.reopened++
	case before:
		p.badOpen = append(p.badOpen, fmt.Sprintf("user %d envelope %d: OPEN_RESULT %d amount %d, drew %d", user, env, st, amount, was))
	}
}

// ended is nil for a connection that ended because the server was killed or
// the probe was stopped: that is how every probe ends.
func (p *probe) ended(err error, stop <-chan struct{}) error {
	select {
	case <-stop:
		return nil
	default:
	}
	if p.killed.Load() {
		return nil
	}
	return err
}

// both lists the ids of b that a also holds.
func both(a, b map[uint64]bool) []uint64 {
	var both []uint64
	for id := range b {
		if a[id] {
			both = append(both, id)
		}
	}
	return both
}

func (p *probe) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}
