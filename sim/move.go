package sim

import (
	"errors"
	"slices"
	"time"

	"github.com/hongbao-io/hongbao/placement"
)

// The move's protocol as package replicated's move.go runs it: the
// source asks the target to prepare (follow the SET until caught up),
// cuts the SET (its last round durable), and asks the target to switch
// (read up to the last message and claim right after it).

// As replicated's bounds on each phase asked of the target.
const (
	prepareWait = time.Minute
	switchWait  = 5 * time.Second
)

var errNoAnswer = errors.New("no answer")

// ask sends op to gateway t over NATS and calls then once: with op's
// answer, or errNoAnswer after within.
func (g *gateway) ask(t *gateway, within duration, op func(reply func(error)), then func(error)) {
	answered, inc := false, g.inc
	once := func(err error) {
		if !answered && g.inc == inc { // not for a later process of g's
			answered = true
			then(err)
		}
	}
	t.receive(g, func() {
		op(func(err error) { g.receive(t, func() { once(err) }) })
	})
	g.later(within, func() { once(errNoAnswer) })
}

// moveOut hands set to gateway to, if the machine agrees.
func (g *gateway) moveOut(set, to int) {
	w := g.w
	t := w.gws[to]
	taker := slices.Contains(g.within(w.cfg.Lease, true), to) && g.takers[to]
	if err := g.step(placement.MoveOut{Set: set, To: to, ToName: t.name, Taker: taker, Now: g.clock()}); err != nil {
		return
	}
	id := g.m.SET(set).Move
	w.log("%s moves SET %d to %s (move %d)", g.name, set, t.name, id)
	end := func(why string) {
		w.log("%s: the move of SET %d to %s ends: %s", g.name, set, t.name, why)
		g.step(placement.MoveEnded{Set: set, Move: id})
		g.ready()
	}
	abort := func() { g.ask(t, time.Second, func(reply func(error)) { t.abortIn(set); reply(nil) }, func(error) {}) }
	g.ask(t, prepareWait, func(reply func(error)) { t.prepareIn(set, g.node, reply) }, func(err error) {
		if err != nil {
			abort()
			end("prepare: " + err.Error())
			return
		}
		g.step(placement.MovePhase{Set: set, Move: id, Phase: placement.Cutting})
		ld := g.sets[set]
		if ld == nil || !g.m.Tells(set) {
			abort()
			end("the SET was lost meanwhile")
			return
		}
		ld.leaving = true
		cut := func() {
			g.step(placement.Cut{Set: set, Move: id})
			g.sets[set] = nil
			g.step(placement.MovePhase{Set: set, Move: id, Phase: placement.Switching})
			last := ld.last
			g.ask(t, switchWait, func(reply func(error)) { t.switchIn(set, g.node, last, reply) }, func(err error) {
				if err != nil {
					end("switch: " + err.Error())
					return
				}
				end("done")
			})
		}
		if ld.round != nil {
			ld.cutting = cut
			return
		}
		cut()
	})
}

// prepareIn follows set for a move from gateway from, and answers once
// caught up.
func (t *gateway) prepareIn(set, from int, reply func(error)) {
	if err := t.step(placement.PrepareIn{Set: set, From: from, Owner: t.view[set].Node, Now: t.clock()}); err != nil {
		t.step(placement.InEnded{Set: set})
		reply(err)
		return
	}
	t.later(t.w.between(20*time.Millisecond, 300*time.Millisecond), func() {
		reply(t.step(placement.CaughtUp{Set: set}))
	})
}

// abortIn gives a move in up.
func (t *gateway) abortIn(set int) {
	t.step(placement.AbortIn{Set: set, Why: "its source gave the move up"})
	t.ready()
}

// switchIn takes set over from gateway from, whose last message of it is
// last: the claim right after it, or none.
func (t *gateway) switchIn(set, from int, last uint64, reply func(error)) {
	w := t.w
	if err := t.step(placement.SwitchIn{Set: set, From: from}); err != nil {
		reply(err)
		return
	}
	ended := func(err error) {
		t.step(placement.InEnded{Set: set})
		t.ready()
		reply(err)
	}
	t.later(w.between(time.Millisecond, 100*time.Millisecond), func() {
		if w.js.last(set) != last {
			ended(errors.New("read past the source's last message"))
			return
		}
		was := t.view[set]
		if was.Node != from {
			ended(errors.New("the SET's last claim is not the source's"))
			return
		}
		t.claim(set, was.Epoch, last, func(c claim, seq uint64, ok bool) {
			if !ok {
				ended(errors.New("the claim did not go through"))
				return
			}
			t.step(placement.Claimed{Set: set, Epoch: c.epoch, Seq: seq, Name: t.name})
			t.load(set, c.epoch, seq, func(err error) {
				if err != nil {
					t.step(placement.Failed{Set: set, Why: err.Error()})
				}
				ended(err)
			})
		})
	})
}

// drain hands every SET of g over, then stops it gracefully: what it
// still tells released, for the others to claim at once.
func (g *gateway) drain() {
	w := g.w
	g.leaving = true
	g.step(placement.Leave{})
	w.log("%s drains", g.name)
	inc := g.inc
	var wait func(left int)
	wait = func(left int) {
		if g.inc != inc {
			return
		}
		if len(g.m.Telling()) > 0 && left > 0 {
			g.later(250*time.Millisecond, func() { wait(left - 1) })
			return
		}
		for _, set := range g.m.Telling() {
			ld := g.sets[set]
			if ld == nil || ld.round != nil || g.step(placement.Release{Set: set}) != nil {
				continue
			}
			epoch, last := ld.epoch, ld.last
			g.js(func() bool {
				c, _, ok := w.js.appendClaim(set, -1, epoch, last)
				if ok {
					w.log("%s releases SET %d", g.name, set)
					w.tellClaim(set, c)
				}
				return ok
			}, func(bool, bool) {})
		}
		g.stop("drained")
		w.at(w.between(time.Second, 3*time.Second), g.start)
	}
	wait(80)
}
