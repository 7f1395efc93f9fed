package sim

import (
	"time"
)

// faultKinds are the faults the seed weighs.
var faultKinds = []string{"kill", "pause", "partition", "deaf", "drift", "election", "drop", "move", "drain"}

// quiet is how long after the last fault every SET must be told again: a
// lease to see its owner gone, a lease heard before a claim, the load.
func (w *world) quiet() duration { return 2*w.cfg.Lease + 7*time.Second }

// fault injects one fault, then the next after a while, until the faults'
// time is over.
func (w *world) fault() {
	w.checkQuiet()
	if w.now >= w.cfg.Faults {
		return
	}
	defer w.at(w.between(300*time.Millisecond, 3*time.Second), w.fault)
	total := 0
	for _, n := range w.weights {
		total += n
	}
	if total == 0 {
		return
	}
	k := w.rng.IntN(total)
	kind := 0
	for k >= w.weights[kind] {
		k -= w.weights[kind]
		kind++
	}
	g := w.gws[w.rng.IntN(len(w.gws))]
	until := w.now
	switch faultKinds[kind] {
	case "kill":
		if !g.up {
			return
		}
		g.stop("killed (kill -9)")
		until += w.between(300*time.Millisecond, 4*time.Second)
		w.at(until-w.now, g.start)
	case "pause":
		if !g.up || g.pausedUntil > w.now {
			return
		}
		until += w.cfg.Lease + w.between(0, 2*time.Second)
		g.pausedUntil = until
		g.unwell = max(g.unwell, until)
		w.log("%s paused (SIGSTOP) until %.3fs", g.name, until.Seconds())
	case "partition":
		if !g.up || g.cut {
			return
		}
		until += w.between(500*time.Millisecond, 5*time.Second)
		w.log("%s cut off from NATS until %.3fs", g.name, until.Seconds())
		w.spell(g, until, &g.cut, func() {
			w.log("%s reaches NATS again", g.name)
			g.later(0, g.catchUp)
		})
	case "deaf":
		if !g.up || g.deaf {
			return
		}
		until += w.between(500*time.Millisecond, 5*time.Second)
		w.log("%s's core NATS connection silent until %.3fs", g.name, until.Seconds())
		w.spell(g, until, &g.deaf, nil)
	case "drift":
		g.skew += w.between(-300*time.Millisecond, 300*time.Millisecond)
		w.log("%s's clock drifts to %v", g.name, g.skew)
	case "election":
		if w.js.down > w.now {
			return
		}
		until += w.between(2*time.Second, 9*time.Second)
		w.js.down = until
		w.log("the stream's leader is elected: no append until %.3fs", until.Seconds())
	case "drop":
		until += w.between(time.Second, 5*time.Second)
		w.drop = []float64{0.05, 0.2, 0.5}[w.rng.IntN(3)]
		w.dropped = max(w.dropped, until)
		w.log("the gateways' messages lost at %.0f%% until %.3fs", w.drop*100, until.Seconds())
		w.at(until-w.now, func() { w.drop = 0 })
	case "move":
		if !w.healthy(g) {
			return
		}
		sets := g.m.Telling()
		if len(sets) == 0 {
			return
		}
		g.moveOut(sets[w.rng.IntN(len(sets))], (g.node+1+w.rng.IntN(len(w.gws)-1))%len(w.gws))
	case "drain":
		if !g.up || g.leaving {
			return
		}
		g.drain()
		until += 25 * time.Second // a drain lasts until every SET is handed over
	}
	w.res.Faults[faultKinds[kind]]++
	w.faulted = max(w.faulted, until)
}

// spell sets a condition of g's (cut off, deaf) until until, then clears it
// and calls ended; a start of g meanwhile clears it itself, and ended is
// not called for a later process.
func (w *world) spell(g *gateway, until duration, on *bool, ended func()) {
	*on = true
	g.unwell = max(g.unwell, until)
	inc := g.inc
	w.at(until-w.now, func() {
		if g.inc != inc {
			return
		}
		*on = false
		if ended != nil {
			ended()
		}
	})
}
