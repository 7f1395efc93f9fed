package ingress

// shedder is one epoll loop's rule for refusing requests that waited too long
// before the loop read them (see "Shedding by delay" in the package doc).
//
// It sees one sample per timestamped read: how long the newest byte of that
// read sat in the socket (the kernel's receive timestamp to the read). At the
// end of every round the round counts as over target when its largest sample
// was, else as under (a round without samples is under: the loop read nothing
// old). Rounds on the other side of target from the current state flip it
// once they have lasted a whole interval without a break:
//
//	idle ──every round over target for interval──▶ shedding
//	  ▲                                                 │
//	  └────────every round under target for interval────┘
//
// While shedding, a read whose sample is over target has its sheddable
// requests refused; a fresher read is served. So a burst that drains within
// an interval (a GC pause, a scheduler hiccup) is served late rather than
// refused, while a standing queue is cut back to target and held there.
//
// Owned by its loop: plain fields, no allocation.
type shedder struct {
	target   int64 // ns; 0: never shed, never sample
	interval int64 // ns
	shedding bool
	since    int64 // unix ns: the end of the first round of an unbroken run against the state; 0: none
	roundMax int64 // the largest sample of the current round, ns
}

func newShedder(target int64) shedder {
	return shedder{target: target, interval: shedIntervalFactor * target}
}

// shedIntervalFactor: the interval is this many targets. It is the longest
// burst the server absorbs without refusing: longer than the worst seconds
// of a load the server carries, short enough that twice the capacity queues
// little more before shedding starts (docs/DESIGN.md, The shedder's interval
// is two targets).
const shedIntervalFactor = 2

// busy reports whether the state may change soon or refusals may happen: the
// loop then timestamps every read.
func (s *shedder) busy() bool { return s.shedding || s.since != 0 }

// sample records that a read's newest byte waited d ns, and reports whether
// that read's sheddable requests are refused.
func (s *shedder) sample(d int64) bool {
	s.roundMax = max(s.roundMax, d)
	return s.shedding && d > s.target
}

// endRound closes the round that ended at now and starts the next.
func (s *shedder) endRound(now int64) {
	over := s.roundMax > s.target
	s.roundMax = 0
	switch {
	case over == s.shedding: // the run against the state, if any, is broken
		s.since = 0
	case s.since == 0:
		s.since = now
	case now-s.since >= s.interval:
		s.shedding, s.since = over, 0
	}
}
