package ingress

// runEvery is how many ready descriptors a loop handles before it runs the
// SETs they published into, and runLimit the most events it runs of one SET
// at a time (see Running SETs in the package doc): the first request of a
// round waits for at most runEvery reads before its SET runs, and a SET
// with more than runLimit events waiting is handed to its own goroutine.
const (
	runEvery = 64
	runLimit = 256
)

// runningSETs makes the loop's frame handler publish through a view of the
// bus that wakes no SET, remembering which it published into: runSETs runs
// them. Not when bare (no SETs) or with Options.Handoff.
func (l *loop) runningSETs() {
	o := &l.ing.o
	if l.p.bare || o.Handoff || o.Bus == nil {
		return
	}
	l.marked = make([]bool, o.Bus.Sets())
	l.toRun = make([]int32, 0, o.Bus.Sets())
	l.p.bus = o.Bus.RunningBus(l.mark)
}

// mark records that the loop published into set since its last runSETs.
func (l *loop) mark(set int) {
	if !l.marked[set] {
		l.marked[set] = true
		l.toRun = append(l.toRun, int32(set))
	}
}

// runSETs runs, on the loop's goroutine, what the SETs it published into
// have waiting, or leaves it to the goroutine of a SET that is running
// (event.Bus.Run).
func (l *loop) runSETs() {
	for _, set := range l.toRun {
		l.marked[set] = false
		l.ing.o.Bus.Run(int(set), runLimit)
	}
	l.toRun = l.toRun[:0]
}
