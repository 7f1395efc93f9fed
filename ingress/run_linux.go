package ingress

// runEvery is how many ready descriptors a loop handles before it runs the
// SETs they published into, and runLimit the most events it runs of one SET
// at a time (see Running SETs in the package doc): the first request of a
// round waits for at most runEvery reads before its SET runs, and a SET
// with more than runLimit events waiting is handed to its own goroutine, so
// that one busy SET does not hold up the loop's reads (docs/DESIGN.md, A
// loop runs its SETs every 64 descriptors, 256 events at most).
const (
	runEvery = 64
	runLimit = 256
)

// runningSETs makes the loop's frame handler publish through a view of the
// bus that wakes no SET, remembering which it published into: runSETs runs
// them. newLoop calls it unless Bare (no SETs) or Options.Handoff, whose
// loops leave toRun empty and every publish wakes its SET's goroutine.
func (l *loop) runningSETs() {
	bus := l.ing.o.Bus
	l.marked = make([]bool, bus.Sets())
	l.toRun = make([]int32, 0, bus.Sets())
	l.p.bus = bus.RunningBus(l.mark)
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
