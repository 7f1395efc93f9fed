package event

// Runner is a transport whose stages a producer may run on its own
// goroutine: the ring when its stages are fused (ring.Ring.Run).
type Runner interface {
	Fused() bool               // the stages run one goroutine's batches: Run can run them
	PublishQuiet(lo, hi int64) // Publish without waking the stages
	Run(limit int)             // run at most limit published events here, or leave them to the stages' goroutine
}

// RunningBus returns a view of b for one producer that runs the SETs'
// stages itself: a publish into a SET whose transport is a fused Runner
// wakes nobody and calls mark(set) instead, and the producer must later
// call Run(set, …) for every SET it marked. Other transports publish as
// through b. The view follows b's routing (Route), and shares its headroom
// and held marks; it is for one goroutine, as mark is.
func (b *Bus) RunningBus(mark func(set int)) *Bus {
	return &Bus{headroom: b.headroom, parent: b, mark: mark, views: make([]view, len(b.routes))}
}

// view is a view's transport of one SET, made for the route it wraps.
type view struct {
	of *route
	t  Transport
}

// viewOf is set's transport through the view b: its route's, a fused
// Runner wrapped so that a publish marks instead of waking. A wrapper is
// made once a route: on the path of every publish only a load and a
// compare.
func (b *Bus) viewOf(set int) Transport {
	r := b.parent.routes[set].Load()
	v := &b.views[set]
	if v.of != r {
		if q, ok := v.t.(*quietRing); ok && q.unrun {
			// Published into quietly and not run yet: run it now, since Run
			// will run the new route's ring.
			q.unrun = false
			q.r.Run(switchRunLimit)
		}
		v.of, v.t = r, r.t
		if rn, ok := r.t.(Runner); ok && rn.Fused() {
			v.t = &quietRing{Transport: r.t, r: rn, set: set, mark: b.mark}
		}
	}
	return v.t
}

// switchRunLimit bounds what a view runs of a ring it stops publishing
// into (the rest is the ring's goroutine's, as past any Run's limit).
const switchRunLimit = 256

// Run runs at most limit of set's published events on the caller's
// goroutine when its transport is a fused Runner and no other goroutine
// runs its stages (ring.Ring.Run); otherwise they are its stages'.
func (b *Bus) Run(set, limit int) {
	switch t := b.ring(set).(type) {
	case *quietRing:
		t.unrun = false
		t.r.Run(limit)
	case Runner:
		t.Run(limit)
	}
}

// quietRing is a SET's transport seen through a RunningBus.
type quietRing struct {
	Transport
	r     Runner
	set   int
	mark  func(set int)
	unrun bool // published into since the view last ran it
}

func (q *quietRing) Publish(lo, hi int64) {
	q.r.PublishQuiet(lo, hi)
	q.unrun = true
	q.mark(q.set)
}
