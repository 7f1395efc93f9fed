// Package sim is a seeded, replayable simulation of a cluster of gateways
// whose SETs fail over (-journal jetstream): the real placement state
// machines of N gateways (package placement), driven the way package
// replicated drives them — claims, takes, serving, moves, releases, a
// gateway fencing itself — over a model of the JetStream semantics they
// rely on (a SET's appends conditional on its last message, claims that
// supersede the claim they name, acks late or lost, a leader's election),
// heartbeats, clients whose money requests carry request ids and are sent
// again until answered, and a simulated clock. Everything runs on one
// goroutine and every choice comes from one seeded source, so a seed
// replays its run exactly (as FoundationDB's simulation and TigerBeetle's
// VOPR do).
//
// Faults, each with a weight the seed chooses: a gateway killed and
// started again, paused past the lease, cut off from NATS, its clock
// drifting; a NATS stream leader's election (seconds without an append);
// heartbeats and the gateways' messages dropped, delayed, duplicated and
// reordered; claims whose ack is lost after they landed; answers lost on
// the way to their clients; moves and drains asked for at any moment.
//
// Checked at every step: a money answer told is durable in its SET's
// journal; a request id is answered with the same amount every time; at
// most one gateway tells a SET's money at any epoch; a take never claims
// the SET of a gateway that was well and heard all along; a gateway stops
// for a loss only when its SET's last claim is another's. Checked once the
// faults have been quiet for a while: every SET is told by a gateway. At
// the end, the faults over and the clients' retries settled: every request
// answered, every id answered once in the journals, and the money told
// equal to the money counted.
//
// What it does not model: the SETs' business (one amount per request
// stands for a SHAKE's, an OPEN's or a SEND's answer), the journal's bytes,
// standbys' and moves' reading of records (a delay), the crossings.
//
// Rejected: package replicated itself over an in-memory NATS. It runs a
// goroutine per take, standby and move and reads the wall clock, so a seed
// could not replay its interleavings; the machine it drives is the part
// whose transitions decide, and it runs here unchanged. docs/TESTING.md
// has the bugs put back to show the checks fail.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/placement"
)

type duration = time.Duration

// Config is a run's shape; the seed chooses the rest.
type Config struct {
	Gateways int      // 3
	Sets     int      // 12
	Lease    duration // 1.5 s, the gateways' -lease
	Faults   duration // how long faults are injected: 40 s
	Settle   duration // then no faults, for the retries to settle: 20 s
	Rate     int      // money requests a second: 40
	// Broken, in the tests that show the checks can fail: "fence", the
	// stream takes appends whatever they expect; "replay", a SET loaded
	// forgets the answers kept for request ids; "inflight", a round whose
	// ack did not come is taken for a fence; "core", a gateway goes by its
	// core connection alone (the others live if heard there, itself current
	// whether it hears itself or not).
	Broken string
}

func (c *Config) fill() {
	c.Gateways = cmp(c.Gateways, 3)
	c.Sets = cmp(c.Sets, 12)
	c.Lease = cmp(c.Lease, 1500*time.Millisecond)
	c.Faults = cmp(c.Faults, 40*time.Second)
	c.Settle = cmp(c.Settle, 20*time.Second)
	c.Rate = cmp(c.Rate, 40)
}

func cmp[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// Result is what a seed's run did and found.
type Result struct {
	Seed        uint64
	Steps       int            // events run
	Faults      map[string]int // injected, by kind
	Transitions map[string]int // of the SETs' states on the gateways: "away→standby/starting"
	Requests    int            // money requests made
	Resent      int            // sent again
	Told        int64          // money told to the clients, fen
	Counted     int64          // money in the journals, fen
	Err         error          // the first violation; nil if none
	Trace       []string       // the steps before it, last first-to-last
}

// traceLen is how many steps a failure shows.
const traceLen = 400

// t0 is the simulated clock's origin.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one run.
type world struct {
	cfg     Config
	rng     *rand.Rand
	now     duration
	q       queue
	seq     uint64
	gws     []*gateway
	js      *stream
	cl      *clients
	res     *Result
	trace   []string
	faulted duration // the last fault's end
	weights []int    // per fault kind
	drop    float64  // probability a gateway's message is lost, now
	dropped duration // the end of the last time messages were lost
	ackLoss float64  // probability a claim's ack is lost
	toldBy  map[[2]uint64]int
	kept    map[uint64]int64 // each request id's money in the journals
	told    []duration       // per SET, when some gateway last told it
}

// Run simulates the cluster from seed.
func Run(seed uint64, cfg Config) Result {
	cfg.fill()
	w := &world{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), js: newStream(cfg.Sets),
		res: &Result{Seed: seed, Faults: map[string]int{}, Transitions: map[string]int{}}, toldBy: map[[2]uint64]int{}, kept: map[uint64]int64{},
		told: make([]duration, cfg.Sets)}
	w.js.noFence = cfg.Broken == "fence"
	w.weights = make([]int, len(faultKinds))
	for i := range w.weights {
		if w.rng.IntN(4) > 0 { // each kind in three seeds of four
			w.weights[i] = 1 + w.rng.IntN(5)
		}
	}
	w.ackLoss = []float64{0, 0.05, 0.3}[w.rng.IntN(3)]
	w.cl = newClients(w)
	for i := range cfg.Gateways {
		g := &gateway{w: w, node: i, name: fmt.Sprintf("gw%d", i), skew: duration(w.rng.IntN(200)-100) * time.Millisecond}
		w.gws = append(w.gws, g)
	}
	for _, g := range w.gws {
		w.at(duration(w.rng.IntN(500))*time.Millisecond, g.start)
	}
	w.at(2*time.Second, w.fault)
	w.at(0, w.cl.generate)
	w.at(0, w.watch)
	end := cfg.Faults + cfg.Settle
	for w.q.Len() > 0 && w.res.Err == nil && w.now < end {
		e := heap.Pop(&w.q).(*event)
		w.now = e.at
		w.res.Steps++
		e.f()
	}
	if w.res.Err == nil {
		w.final()
	}
	w.res.Trace = w.trace
	return *w.res
}

// event is a step at a time; seq orders the steps of one instant.
type event struct {
	at  duration
	seq uint64
	f   func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// at runs f after d.
func (w *world) at(d duration, f func()) {
	w.seq++
	heap.Push(&w.q, &event{at: w.now + d, seq: w.seq, f: f})
}

// between is a random duration in [lo, hi).
func (w *world) between(lo, hi duration) duration { return lo + duration(w.rng.Int64N(int64(hi-lo))) }

// chance is true with probability p.
func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

// log adds a line to the trace.
func (w *world) log(format string, args ...any) {
	line := fmt.Sprintf("%9.3fs ", w.now.Seconds()) + fmt.Sprintf(format, args...)
	if len(w.trace) == traceLen {
		w.trace = slices.Delete(w.trace, 0, 1)
	}
	w.trace = append(w.trace, line)
}

// fail records the first violation.
func (w *world) fail(format string, args ...any) {
	if w.res.Err == nil {
		w.res.Err = fmt.Errorf("at %.3fs: %s", w.now.Seconds(), fmt.Sprintf(format, args...))
		w.log("VIOLATION: %v", w.res.Err)
	}
}

// healthy reports whether g could serve: up, not paused, not cut off.
func (w *world) healthy(g *gateway) bool {
	return g.up && g.pausedUntil <= w.now && !g.cut
}

// String formats a Result for a person.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d steps, %d requests (%d sent again), told %d fen, counted %d", r.Seed, r.Steps, r.Requests, r.Resent, r.Told, r.Counted)
	if r.Err != nil {
		fmt.Fprintf(&b, "\nFAILED: %v", r.Err)
	}
	return b.String()
}

// stepAll steps g's machine with ev and records the transitions it made.
func (g *gateway) step(ev placement.Event) error {
	before := g.m.Sets()
	err := g.m.Step(ev)
	g.w.checkTold()
	for set, st := range g.m.Sets() {
		if b := before[set]; b.String() != st.String() {
			g.w.res.Transitions[b.String()+"→"+st.String()]++
		}
	}
	return err
}
