package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"hongbao/perf/internal/harness"
	"hongbao/proto"
)

// probeBase is above every load-client user: the probe of SET s is the
// first user of s from it.
const probeBase = 1_000_000

// probes are a user per SET, each on a connection of the tool's own that
// SHAKEs every period while a fault is measured: LOGIN at a gateway,
// LOGIN_ACK 3 followed to the SET's owner, a new LOGIN at the next gateway
// on ERROR 9, a closed connection or an answer not within a second.
type probes struct {
	addrs []string // the gateways' client addresses (the same across restarts)
	every time.Duration
	p     []*probe
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// answer is when a money answer came, and when its connection logged in.
type answer struct{ at, login time.Time }

// probe is one SET's probe.
type probe struct {
	set  int
	user uint32

	mu         sync.Mutex
	money      []answer // each money answer (SHAKE_RESULT 1) this window
	empty      int      // SHAKE_RESULT 0 this window: the SET's pool was empty
	logins     int      // this window
	amount     int64    // fen told, the whole run
	got        int64    // money answers, the whole run
	noOwner    int      // LOGIN_ACK 3 naming no gateway, this window
	dialErrors int
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
		ps.wg.Add(1)
		go func() {
			defer ps.wg.Done()
			p.run(ctx, ps.addrs, ps.every)
		}()
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
	var c *harness.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	next, stamp := p.set%len(addrs), uint64(1)
	var login time.Time
	drop := func() {
		c.Close()
		c, next = nil, (next+1)%len(addrs)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c == nil {
			var err error
			c, err = harness.DialOwner(addrs[next], p.user, time.Second)
			p.mu.Lock()
			switch {
			case errors.Is(err, harness.ErrNoOwner):
				p.noOwner++
			case err != nil:
				p.dialErrors++
				next = (next + 1) % len(addrs)
			default:
				p.logins++
				login = time.Now()
			}
			p.mu.Unlock()
			if err != nil {
				continue
			}
		}
		stamp++
		if _, err := c.NC.Write(proto.AppendShake(nil, stamp)); err != nil {
			drop()
			continue
		}
		f, err := c.Answer(stamp, time.Second)
		c.Pushed = c.Pushed[:0] // a send campaign's pushes: not opened
		if err != nil {
			drop()
			continue
		}
		st, _, amount := f.ShakeResult()
		p.mu.Lock()
		switch st {
		case proto.ShakeGot:
			p.money = append(p.money, answer{time.Now(), login})
			p.amount += int64(amount)
			p.got++
		case proto.ShakeNothing:
			p.empty++
		}
		p.mu.Unlock()
	}
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

// why says what the probes of sets met this window: empty pools, LOGINs
// answered LOGIN_ACK 3 without an owner, failed connects or LOGINs.
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
