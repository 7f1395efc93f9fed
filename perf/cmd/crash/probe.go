package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/perf/internal/harness"
	"github.com/hongbao-io/hongbao/proto"
)

// probe is a few users of the tool's own, each an application's client
// (package client), that SHAKE one request at a time, now and then SEND a
// group envelope and OPEN every envelope they are pushed, recording every
// envelope id they are handed, the shares they drew and the money they are
// told. The request in flight when the server was killed is sent again with
// its request id once the client has logged in again, as package client
// does: the money the server counted is then the money the probe was told.
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
}

// drawn is a share: a user's in an envelope.
type drawn struct {
	user uint32
	env  uint64
}

func newProbe() *probe {
	return &probe{shakeIDs: map[uint64]bool{}, groupIDs: map[uint64]bool{}, opened: map[drawn]uint32{}}
}

// told returns the money the probe was told so far: SHAKE and OPEN.
func (p *probe) told() (shake, open uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shakeFen, p.openFen
}

// reopenMax bounds the envelopes a probe user OPENs again after each
// login: its latest ones.
const reopenMax = 20

// run drives users until stop is closed (the request in flight then gets 5 s
// for its answer) or their connections end, and returns once every one has
// stopped. With reconnect a user's client logs in again after the server
// was killed, and first OPENs again the latest envelopes it opened.
func (p *probe) run(addr string, users, recipients []uint32, stop <-chan struct{}, reconnect bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-stop; harness.Sleep(ctx, 5*time.Second); cancel() }()
	var wg sync.WaitGroup
	for _, u := range users {
		recipient := recipients[0]
		if recipient == u {
			recipient = recipients[1%len(recipients)]
		}
		wg.Go(func() {
			err := p.user(ctx, addr, u, recipient, stop, reconnect)
			select {
			case <-stop: // a probe stopped ends so, and one whose server was killed
			default:
				if err != nil && !p.killed.Load() {
					p.mu.Lock()
					p.errs = append(p.errs, fmt.Errorf("probe user %d: %w", u, err))
					p.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

func (p *probe) user(ctx context.Context, addr string, user, recipient uint32, stop <-chan struct{}, reconnect bool) error {
	var login atomic.Bool
	opts := []client.Option{client.DialTimeout(2 * time.Second), client.ReconnectWait(100*time.Millisecond, 100*time.Millisecond),
		client.OnLogin(func(string) { login.Store(true) })}
	if !reconnect {
		opts = append(opts, client.NoReconnect())
	}
	c, err := client.Dial(ctx, []string{addr}, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Login(ctx, user, nil); err != nil {
		return err
	}
	var mine []uint64  // the envelopes user opened, oldest first
	var again []uint64 // OPENed before a login: answered 1 with the same share
	for i := 1; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if login.Swap(false) {
			again = mine[max(0, len(mine)-reopenMax):]
		}
		var env uint64
		open := len(again) > 0
		if open {
			env, again = again[0], again[1:]
		} else {
			select {
			case pu := <-c.Pushes():
				env, open = pu.Envelope, pu.Type == proto.Envelope
			default:
			}
		}
		var err error
		switch {
		case open:
			var amount uint32
			amount, err = c.Open(ctx, env)
			p.opening(user, env, amount, err, &mine)
		case i%50 == 0:
			env, err = c.Send(ctx, 30, []uint32{recipient})
			if err == nil {
				p.record(p.groupIDs, env, 0, nil)
			}
		default:
			var amount uint32
			env, amount, err = c.Shake(ctx)
			if err == nil {
				p.record(p.shakeIDs, env, amount, &p.shakeFen)
			}
		}
		if se := new(client.StatusError); err != nil && !errors.As(err, &se) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// record notes an envelope id handed out (never twice) and its amount.
func (p *probe) record(ids map[uint64]bool, env uint64, amount uint32, fen *uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ids[env] {
		p.twice = append(p.twice, env)
	}
	ids[env] = true
	if fen != nil {
		*fen += uint64(amount)
	}
}

// opening records the answer to an OPEN of env: a share drawn (never twice
// for one envelope), or a repeated OPEN of one drawn before, which must
// answer 1 with the same share.
func (p *probe) opening(user uint32, env uint64, amount uint32, err error, mine *[]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	was, before := p.opened[drawn{user, env}]
	switch {
	case err == nil && before:
		p.twice = append(p.twice, env)
	case err == nil:
		p.opened[drawn{user, env}] = amount
		p.openFen += uint64(amount)
		*mine = append(*mine, env)
	case before && errors.Is(err, client.ErrAlreadyOpened) && amount == was:
		p.reopened++
	case before:
		p.badOpen = append(p.badOpen, fmt.Sprintf("user %d envelope %d: %v, amount %d, drew %d", user, env, err, amount, was))
	}
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
