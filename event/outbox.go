package event

// Outbox publishes events from a stage into any SET's ring without ever
// blocking the stage: a stage that waited for room in another SET's ring
// could wait on a stage that waits for room in its own (a cycle of full
// rings). What a full ring refuses is held, in order, and retried at the
// stage's next batch; the Bus's ticker makes sure a next batch comes.
//
// An Outbox belongs to one stage goroutine and is not safe for concurrent use.
type Outbox struct {
	bus  *Bus
	home int // the SET of the owning stage, ticked while events are held
	held []heldEvent

	cur     Slot // slot being filled between Put and Done
	curTo   int  // its SET
	claimed bool
	spare   Event // filled instead of a slot when the event must be held
	spareTo int
}

type heldEvent struct {
	set int
	ev  Event
}

// NewOutbox returns the outbox of a stage of SET home.
func NewOutbox(bus *Bus, home int) *Outbox { return &Outbox{bus: bus, home: home} }

// Put returns an event to fill for set; call Done when it is filled. The
// event is zeroed.
func (o *Outbox) Put(set int) *Event {
	if len(o.held) == 0 { // keep order: nothing jumps the held queue
		if s, ok := o.bus.ClaimAnswer(set); ok {
			o.cur, o.curTo, o.claimed = s, set, true
			ev := s.Event()
			*ev = Event{}
			return ev
		}
	}
	o.claimed, o.spareTo = false, set
	o.spare = Event{}
	return &o.spare
}

// Done publishes the event filled since Put, or holds it. An answer to a
// connection of a SET that runs elsewhere now (it moved) is dropped
// instead: that connection is gone with the SET.
func (o *Outbox) Done() {
	if o.claimed {
		o.claimed = false
		s := o.cur
		if ev := s.Event(); o.bus.stray(o.curTo, ev) {
			*ev = Event{} // a slot claimed is published: as nothing
		}
		s.Publish()
		return
	}
	o.held = append(o.held, heldEvent{set: o.spareTo, ev: o.spare})
	o.bus.MarkHeld(o.home)
}

// Retry publishes held events, in order, until one is refused again.
func (o *Outbox) Retry() {
	i := 0
	for ; i < len(o.held); i++ {
		h := &o.held[i]
		if o.bus.stray(h.set, &h.ev) {
			continue
		}
		s, ok := o.bus.ClaimAnswer(h.set)
		if !ok {
			break
		}
		*s.Event() = h.ev
		s.Publish()
	}
	if i == 0 {
		if len(o.held) > 0 {
			o.bus.MarkHeld(o.home)
		}
		return
	}
	n := copy(o.held, o.held[i:])
	clear(o.held[n:])
	o.held = o.held[:n]
	if n > 0 {
		o.bus.MarkHeld(o.home)
	}
}

// Held is the number of events waiting for room.
func (o *Outbox) Held() int { return len(o.held) }
