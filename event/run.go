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
// through b. The view shares b's routing, headroom and held marks; it is
// for one goroutine, as mark is.
func (b *Bus) RunningBus(mark func(set int)) *Bus {
	v := *b
	v.rings = make([]Transport, len(b.rings))
	for set, t := range b.rings {
		v.rings[set] = t
		if r, ok := t.(Runner); ok && r.Fused() {
			v.rings[set] = &quietRing{Transport: t, r: r, set: set, mark: mark}
		}
	}
	return &v
}

// Run runs at most limit of set's published events on the caller's
// goroutine when its transport is a fused Runner and no other goroutine
// runs its stages (ring.Ring.Run); otherwise they are its stages'.
func (b *Bus) Run(set, limit int) {
	switch t := b.rings[set].(type) {
	case *quietRing:
		t.r.Run(limit)
	case Runner:
		t.Run(limit)
	}
}

// quietRing is a SET's transport seen through a RunningBus.
type quietRing struct {
	Transport
	r    Runner
	set  int
	mark func(set int)
}

func (q *quietRing) Publish(lo, hi int64) {
	q.r.PublishQuiet(lo, hi)
	q.mark(q.set)
}
