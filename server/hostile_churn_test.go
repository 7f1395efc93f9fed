package server_test

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/client/wire"
	"github.com/hongbao-io/hongbao/proto"
)

// Attacks of many connections a second: half a frame then a reset, and the
// login storm.

// attackResets opens connections that send half a frame and reset: most
// before LOGIN (half a LOGIN), every fifth after it (half a CHAT).
func attackResets(a *attacker) {
	t, sz := a.t, a.sz
	start := time.Now()
	failed, err := swarm(sz.Resets, 64, func(i int) error {
		user := resetUsers + uint32(i)
		var c *wire.Conn
		var err error
		var f []byte
		if i%5 == 0 {
			c, err = attackLogin(a.ts, user)
			f = proto.AppendChat(nil, 1, 1, []byte("half of this never comes"))
		} else {
			c, err = attackDial(a.ts)
			f = proto.AppendLogin(nil, 1, user, tokenFor(user))
		}
		if err != nil {
			return err
		}
		c.SetWriteDeadline(time.Now().Add(waitTime))
		err = c.Send(f[:len(f)/2])
		reset(c.Conn)
		return err
	})
	if failed > 0 {
		t.Errorf("resets: %d of %d connections failed: %v", failed, sz.Resets, err)
	}
	t.Logf("resets: %d connections sent half a frame and reset in %v", sz.Resets, time.Since(start).Round(time.Millisecond))
}

// attackStorm logs in sz.Storm connections as fast as 10,000 a second,
// each leaving (with a reset, so that 10,000 TIME_WAITs do not pile up on
// the loopback's ports) once its LOGIN_ACK came: at most sz.StormOpen are
// open at once.
func attackStorm(a *attacker) {
	t, sz := a.t, a.sz
	sem := make(chan struct{}, sz.StormOpen)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var mu sync.Mutex
	var first error
	start := time.Now()
	for i := range sz.Storm {
		if i%10 == 0 { // 10 a millisecond
			if d := time.Until(start.Add(time.Duration(i/10) * time.Millisecond)); d > 0 {
				time.Sleep(d)
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := attackLogin(a.ts, stormUsers+uint32(i))
			if err != nil {
				if failed.Add(1) == 1 {
					mu.Lock()
					first = err
					mu.Unlock()
				}
				return
			}
			reset(c.Conn)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Errorf("storm: %d of %d LOGINs failed; first: %v", n, sz.Storm, first)
	}
	t.Logf("storm: %d LOGINs (at most %d open at once) in %v: %.0f a second", sz.Storm, sz.StormOpen,
		took.Round(time.Millisecond), float64(sz.Storm)/took.Seconds())
}
