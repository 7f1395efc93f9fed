package sim

import (
	"time"
)

// What a gateway answers a money request.
const (
	told  = iota // the money answer
	moved        // ERROR 9 or LOGIN_ACK 3: ask the gateway named (-1: any)
	retry        // "overloaded": ask again later
)

// request is one money request of a client and its retries: the same id
// each time, as package client sends it.
type request struct {
	id       uint64
	set      int
	sent     int
	attempt  int // the attempt under way: a timer of an earlier one does nothing
	hint     int // the gateway to ask next; -1 any
	answered bool
	amount   int64
	answer   func(kind int, amount int64, node int) // the attempt's, while a round holds it
}

// clients make the money requests and send each again until answered.
type clients struct {
	w    *world
	reqs []*request
	// resendAfter is the client's bound on an answer before it asks again.
	resendAfter duration
	// lose is the probability an answer is lost on its way (the
	// connection dropped).
	lose float64
}

func newClients(w *world) *clients {
	return &clients{w: w, resendAfter: time.Second, lose: []float64{0, 0.02, 0.1}[w.rng.IntN(3)]}
}

// generate makes a request every 1/Rate s while the faults last.
func (c *clients) generate() {
	w := c.w
	if w.now >= w.cfg.Faults {
		return
	}
	r := &request{id: uint64(len(c.reqs)) + 1, set: w.rng.IntN(w.cfg.Sets), hint: -1}
	c.reqs = append(c.reqs, r)
	w.res.Requests++
	c.send(r)
	w.at(time.Second/time.Duration(w.cfg.Rate), c.generate)
}

// send sends r (again) to its hint, or to any gateway.
func (c *clients) send(r *request) {
	w := c.w
	if r.answered {
		return
	}
	if r.sent > 0 {
		w.res.Resent++
	}
	r.sent++
	r.attempt++
	attempt := r.attempt
	node := r.hint
	if node < 0 {
		node = w.rng.IntN(len(w.gws))
	}
	g := w.gws[node]
	w.at(c.resendAfter, func() {
		if r.attempt == attempt && !r.answered {
			r.hint = -1
			c.send(r)
		}
	})
	if !g.up {
		w.at(w.between(50*time.Millisecond, 200*time.Millisecond), func() { // connection refused
			if r.attempt == attempt {
				r.hint = -1
				c.send(r)
			}
		})
		return
	}
	g.later(w.between(time.Millisecond, 5*time.Millisecond), func() {
		g.request(r, func(kind int, amount int64, node int) {
			if w.chance(c.lose) {
				return // the connection went: the client asks again
			}
			w.at(w.between(time.Millisecond, 5*time.Millisecond), func() { c.answered(r, attempt, kind, amount, node) })
		})
	})
}

// answered takes an answer to r's attempt.
func (c *clients) answered(r *request, attempt, kind int, amount int64, node int) {
	w := c.w
	switch kind {
	case told:
		if !r.answered {
			r.answered, r.amount = true, amount
			w.res.Told += amount
		} else if r.amount != amount {
			w.fail("request %d of SET %d answered %d fen, then %d", r.id, r.set, r.amount, amount)
		}
	case moved:
		if r.attempt == attempt && !r.answered {
			r.hint = node
			w.at(w.between(10*time.Millisecond, 50*time.Millisecond), func() {
				if r.attempt == attempt {
					c.send(r)
				}
			})
		}
	case retry:
		if r.attempt == attempt && !r.answered {
			r.hint = -1
			w.at(w.between(50*time.Millisecond, 200*time.Millisecond), func() {
				if r.attempt == attempt {
					c.send(r)
				}
			})
		}
	}
}
