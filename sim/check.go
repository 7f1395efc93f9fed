package sim

import "time"

// durable records the answers of a round that landed in set's journal:
// each request id is answered with money once in all the journals.
func (w *world) durable(set int, answers []answer) {
	for _, a := range answers {
		if prev, ok := w.kept[a.id]; ok {
			w.fail("request %d answered with money twice in the journals (SET %d): %d fen, then %d", a.id, set, prev, a.amount)
		}
		w.kept[a.id] = a.amount
		w.res.Counted += a.amount
	}
}

// tellClaim sends a claim just appended to every gateway's watch.
func (w *world) tellClaim(set int, c claim) {
	for _, g := range w.gws {
		if !g.up {
			continue
		}
		g.later(w.between(time.Millisecond, 50*time.Millisecond), func() {
			if !g.cut {
				g.heardClaim(set, w.js.claim[set])
				g.ready()
			}
		})
	}
}

// toldMoney checks a money answer g is about to tell: durable, the same
// as any told before for its id, and told for its SET at its epoch by g
// alone.
func (w *world) toldMoney(g *gateway, set int, epoch uint64, r *request, amount int64) {
	if a, ok := w.kept[r.id]; !ok || a != amount {
		w.fail("%s tells request %d %d fen, which its SET %d's journal does not hold", g.name, r.id, amount, set)
	}
	k := [2]uint64{uint64(set), epoch}
	if n, ok := w.toldBy[k]; ok && n != g.node {
		w.fail("SET %d's money at epoch %d told by gw%d and by %s", set, epoch, n, g.name)
	}
	w.toldBy[k] = g.node
}

// checkClaim: a take's claim never supersedes a gateway that was well
// all along — up, running, reaching NATS — for a lease and a margin, while
// no message was lost: such a gateway is heard, and its SETs are not
// orphans (the claim would fence a healthy owner and stop it).
func (w *world) checkClaim(set, prev int, by *gateway) {
	if prev < 0 || prev == by.node {
		return
	}
	o, window := w.gws[prev], w.cfg.Lease+time.Second
	if o.up && o.unwell <= w.now-window && w.dropped <= w.now-window {
		w.fail("%s claims SET %d from gw%d, which was well and heard for the last %v", by.name, set, prev, window)
	}
}

// watch checks the SETs' tellers every 100 ms besides every transition:
// a gateway paused or cut off tells nothing, though its machine has not
// changed.
func (w *world) watch() {
	w.checkTold()
	w.at(100*time.Millisecond, w.watch)
}

// checkTold, after every transition: no two gateways tell a SET at one epoch,
// and when each SET was last told by a gateway that could serve it.
func (w *world) checkTold() {
	for set := range w.told {
		var epoch uint64
		teller := -1
		for _, g := range w.gws {
			if !g.up || !g.m.Tells(set) {
				continue
			}
			e := g.m.SET(set).Epoch
			if teller >= 0 && e == epoch {
				w.fail("SET %d told at epoch %d by gw%d and %s", set, e, teller, g.name)
			}
			teller, epoch = g.node, e
			if w.healthy(g) && !g.fenced && g.sets[set] != nil {
				w.told[set] = w.now
			}
		}
	}
}

// checkQuiet: a while after the last fault, every SET is told.
func (w *world) checkQuiet() {
	if w.now-w.faulted < w.quiet() {
		return
	}
	for set, at := range w.told {
		if w.now-at > 2*time.Second {
			w.fail("SET %d told by no gateway for %.3fs, %.3fs after the last fault", set, (w.now - at).Seconds(), (w.now - w.faulted).Seconds())
		}
	}
}

// final checks the end: every request answered, once, and the money told
// equal to the money counted.
func (w *world) final() {
	w.checkQuiet()
	for _, r := range w.cl.reqs {
		if !r.answered {
			w.fail("request %d of SET %d never answered (sent %d times)", r.id, r.set, r.sent)
			return
		}
		if a, ok := w.kept[r.id]; !ok || a != r.amount {
			w.fail("request %d told %d fen; its SET's journal holds %d", r.id, r.amount, a)
		}
	}
	if w.res.Told != w.res.Counted {
		w.fail("money told %d fen, counted %d", w.res.Told, w.res.Counted)
	}
}
