package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/client"
)

// probeBase is above every load-client user: the probe of SET s is the
// first user of s from it.
const probeBase = 1_000_000

// probes are a user per SET, each an application's client (package client)
// that SHAKEs every period while a fault is measured: it follows LOGIN_ACK 3
// to the SET's owner and logs in again at the next gateway on ERROR 9, a
// closed connection or a PING unanswered.
type probes struct {
	addrs []string // the gateways' client addresses (the same across restarts)
	every time.Duration
	p     []*probe
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// answer is when a money answer came, and when its connection logged in.
type answer struct{ at, login time.Time }

// probe is one SET's probe; its figures are this window's but amount and got.
type probe struct {
	set  int
	user uint32

	mu                          sync.Mutex
	money                       []answer // SHAKE_RESULT 1
	empty                       int      // SHAKE_RESULT 0: the SET's pool was empty
	logins, noOwner, dialErrors int
	amount, got                 int64 // fen told and money answers, the whole run
}

func newProbes(sets int, addrs []string, every time.Duration) *probes {
	ps := &probes{addrs: addrs, every: every}
	for s := range sets {
		ps.p = append(ps.p, &probe{set: s, user: uint32((probeBase/sets+1)*sets + s)}) // user mod sets is its SET
	}
	return ps
}

// start starts every probe's SHAKEs, this window's figures cleared.
func (ps *probes) start(ctx context.Context) {
	ctx, ps.stop = context.WithCancel(ctx)
	for _, p := range ps.p {
		p.mu.Lock()
		p.money, p.empty, p.logins, p.noOwner, p.dialErrors = nil, 0, 0, 0, 0
		p.mu.Unlock()
		ps.wg.Go(func() { p.run(ctx, ps.addrs, ps.every) })
	}
}

// end stops the probes and waits for them.
func (ps *probes) end() {
	ps.stop()
	ps.wg.Wait()
}

// moneyAfter waits until each probe of sets has a money answer after t
// (fresh: on a connection logged in after t, so not from a gateway that
// answered before the fault), or until deadline, and returns the sets that
// have none.
func (ps *probes) moneyAfter(ctx context.Context, sets []int, t time.Time, fresh bool, deadline time.Time) []int {
	for {
		var missing []int
		for _, s := range sets {
			if _, ok := ps.p[s].firstAfter(t, fresh); !ok {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return missing
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstAfter is the first money answer after t (fresh: on a connection
// logged in after t).
func (p *probe) firstAfter(t time.Time, fresh bool) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.money {
		if a.at.After(t) && (!fresh || a.login.After(t)) {
			return a.at, true
		}
	}
	return time.Time{}, false
}

// gapAfter is the longest time without a money answer from t to end.
func (p *probe) gapAfter(t, end time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	last := t
	for _, a := range p.money {
		if a.at.After(t) {
			gap = max(gap, a.at.Sub(last))
			last = a.at
		}
	}
	return max(gap, end.Sub(last))
}

func (p *probe) run(ctx context.Context, addrs []string, every time.Duration) {
	var login atomic.Int64 // when the connection that answers logged in (unix ns)
	onLogin := func(string) {
		login.Store(time.Now().UnixNano())
		p.mu.Lock()
		p.logins++
		p.mu.Unlock()
	}
	// Each probe starts at another gateway; a silent one (paused) is found
	// out by its unanswered PING within two periods.
	first := p.set % len(addrs)
	order := append(append([]string(nil), addrs[first:]...), addrs[:first]...)
	var c *client.Client
	var seen client.Stats // c's counters already added to this window's
	var pending uint64    // the request id of a SHAKE whose bound ran out before its answer
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if c != nil && pending != 0 { // its answer, whatever the first call did
				rctx, cancel := context.WithTimeout(client.WithRequestID(context.Background(), pending), 10*time.Second)
				_, amount, err := c.Shake(rctx)
				cancel()
				p.told(amount, err)
			}
			if c != nil {
				c.Close()
			}
			return
		case <-t.C:
		}
		if c == nil {
			var err error
			c, err = client.Dial(ctx, order, client.DialTimeout(time.Second), client.PingInterval(max(every, 250*time.Millisecond)),
				client.ReconnectWait(every, every), client.OnLogin(onLogin))
			if err == nil {
				lctx, cancel := context.WithTimeout(ctx, time.Second)
				err = c.Login(lctx, p.user, nil)
				cancel()
			}
			if err != nil {
				p.count(c, &seen)
				if c != nil {
					c.Close()
					c, seen = nil, client.Stats{}
				}
				continue
			}
		}
		// A SHAKE its bound cut short is asked again with its request id
		// before any new one: only its id tells the money it made.
		again := pending != 0
		if !again {
			pending = client.NewRequestID()
		}
		sctx, cancel := context.WithTimeout(client.WithRequestID(ctx, pending), time.Second)
		_, amount, err := c.Shake(sctx)
		cancel()
		// An answer ends the id, but not "overloaded" to a SHAKE asked again:
		// refused at the door, while the first may still be held for its journal.
		if se := new(client.StatusError); err == nil || errors.As(err, &se) && !(again && errors.Is(err, client.ErrOverloaded)) {
			pending = 0
		}
		p.count(c, &seen)
		if err == nil {
			p.mu.Lock()
			p.money = append(p.money, answer{time.Now(), time.Unix(0, login.Load())})
			p.mu.Unlock()
		}
		p.told(amount, err)
		for len(c.Pushes()) > 0 { // a send campaign's pushes: not opened
			<-c.Pushes()
		}
	}
}

// told counts the answer to a SHAKE: amount fen got, or err.
func (p *probe) told(amount uint32, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil:
		p.amount += int64(amount)
		p.got++
	case errors.Is(err, client.ErrEmpty):
		p.empty++
	}
}

// count adds what c went through since seen to this window's figures.
func (p *probe) count(c *client.Client, seen *client.Stats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c == nil {
		p.dialErrors++
		return
	}
	st := c.Stats()
	p.noOwner += int(st.NoOwner - seen.NoOwner)
	p.dialErrors += int(st.DialErrors - seen.DialErrors)
	*seen = st
}

// dump writes this window's money answers as lines of probes.csv: the
// fault, the SET, when (seconds since start) and when its connection
// logged in.
func (ps *probes) dump(w io.Writer, fault int, start time.Time) {
	for _, p := range ps.p {
		p.mu.Lock()
		for _, a := range p.money {
			fmt.Fprintf(w, "%d,%d,%.3f,%.3f\n", fault, p.set, a.at.Sub(start).Seconds(), a.login.Sub(start).Seconds())
		}
		p.mu.Unlock()
	}
}

// why says what the probes of sets met this window.
func (ps *probes) why(sets []int) string {
	var parts []string
	for _, s := range sets {
		p := ps.p[s]
		p.mu.Lock()
		parts = append(parts, fmt.Sprintf("SET %d: %d logins, %d empty SHAKEs, %d LOGIN_ACK 3 without an owner, %d failed connects or LOGINs", s, p.logins, p.empty, p.noOwner, p.dialErrors))
		p.mu.Unlock()
	}
	return strings.Join(parts, "; ")
}

// told is the money the probes were told over the run: fen and answers.
func (ps *probes) told() (amount, got int64) {
	for _, p := range ps.p {
		p.mu.Lock()
		amount, got = amount+p.amount, got+p.got
		p.mu.Unlock()
	}
	return amount, got
}
