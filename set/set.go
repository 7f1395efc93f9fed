package set

import (
	"fmt"
	"time"

	"github.com/hongbao-io/hongbao/egress"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/internal/transport"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/stages"
)

// Stages is the number of stages of a SET: session, shake, split, egress.
const Stages = 4

// egressMaxBatch caps the events the egress takes at once: a connection's
// backlog is checked against MaxPending after each batch's writes, so a
// batch can overshoot it by at most this many answers.
const egressMaxBatch = 256

// chatShare: chats may fill at most 1/chatShare of a connection's
// MaxPending (Limits.ChatBacklog); past it they are dropped, never the
// connection. The rest is room for the user's own answers and ENVELOPE
// pushes, which are never dropped: a slow reader is cut off by those alone.
const chatShare = 2

// Options configures a SET; every SET of a server gets the same.
type Options struct {
	Ring          int           // slots of the transport, a power of two
	Pipeline      string        // the transport: "ring" or "" (package ring), "disruptor" or "chan" (package transport)
	Wait          ring.Wait     // ring only: how a stage waits for events
	Spins, Yields int           // ring only: rounds before a waiting stage yields, parks (see ring.Options)
	Fused         bool          // ring only: the four stages on one goroutine, one wake-up per batch
	Egress        egress.Mode   // when the egress writes: egress.Batch, or egress.EachFrame for comparison
	Limits        stages.Limits // of group envelopes, for the split stage; a ChatBacklog of 0 becomes MaxPending / 2
	MaxPending    int           // output bytes a connection may have waiting before it is cut off
	Now           func() int64  // unix ns; nil: time.Now
	Seed          uint64        // the session and split stages' random numbers: each SET's derive from it and its index
	// Journal, when not nil, gets a producer for the shake and the split
	// stage of each SET (in SET order: their ids are the same at every start
	// with the same -sets), and the egress holds money answers until it has
	// made their records durable.
	Journal *journal.Journal
	// Remote, in a cluster, returns the transport of a SET another gateway
	// runs (the link to it), nil for a SET run here. nil: every SET is here.
	Remote func(set int) event.Transport
	// SlowAnswer, when not nil, is called from each SET's egress with the
	// decode → write time of the slowest answer of a batch in which one took
	// longer than SlowOver (egress.Egress.WatchSlow): it must not block.
	SlowAnswer func(ns int64)
	SlowOver   time.Duration
}

// Goroutines is the number of goroutines that run one SET's stages.
func (o Options) Goroutines() int {
	if o.Fused && isRing(o.Pipeline) {
		return 1
	}
	return Stages
}

func isRing(pipeline string) bool { return pipeline == "" || pipeline == "ring" }

// SET is one SET: its transport, the stages AddStages adds to it, and the
// ledger they write.
type SET struct {
	index   int
	o       Options
	t       event.Transport
	add     addStage
	ledger  *ledger.Ledger
	session *stages.Session
	shake   *stages.Shake
	split   *stages.Split
	egress  *egress.Egress
	pids    [2]int               // the journal producers of shake and split; -1 without a journal
	jp      [2]*journal.Producer // those producers, kept for Renew
}

// addStage adds the next stage of a SET's chain: name for errors, maxBatch 0
// for no cap.
type addStage func(h ring.Handler[event.Event], name string, maxBatch int)

// New makes SET index's empty transport and ledger: the first phase.
func New(index int, o Options) (*SET, error) {
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
	t, add, err := newTransport(o)
	if err != nil {
		return nil, err
	}
	return &SET{index: index, o: o, t: t, add: add, ledger: new(ledger.Ledger)}, nil
}

// Transport is the SET's transport, for the bus.
func (s *SET) Transport() event.Transport { return s.t }

// Ledger is the SET's counters.
func (s *SET) Ledger() *ledger.Ledger { return s.ledger }

// AddStages adds the SET's chain of stages to its transport, each publishing
// into the SETs of bus, whose SET index must be this one: the second phase.
// Call it once, before the bus starts the transports.
func (s *SET) AddStages(bus *event.Bus) error {
	if s.index >= bus.Sets() || bus.Ring(s.index) != s.t {
		return fmt.Errorf("set: the bus's SET %d is not this SET", s.index)
	}
	var jp [2]*journal.Producer
	if j := s.o.Journal; j != nil {
		// Both in the SET's group: where the journal is on JetStream, the
		// SET's records are its own subject, which its owner appends to.
		jp = [2]*journal.Producer{j.ProducerIn(s.index), j.ProducerIn(s.index)}
	}
	return s.addStages(bus, jp)
}

// Renew returns a blank SET in s's place, for a SET that left this gateway
// and may come back, or whose loading was abandoned: a new transport and
// stages, a zero ledger, and s's journal producers, whose ids are the
// SET's in every journal. s must not run (stopped, or never started);
// routing the bus to the new transport is the caller's.
func (s *SET) Renew(bus *event.Bus) (*SET, error) {
	n, err := New(s.index, s.o)
	if err != nil {
		return nil, err
	}
	if err := n.addStages(bus, s.jp); err != nil {
		return nil, err
	}
	return n, nil
}

// addStages adds the stages, journaling to producers jp (nil: no journal).
func (s *SET) addStages(bus *event.Bus, jp [2]*journal.Producer) error {
	i, o, l := s.index, s.o, s.ledger
	split, err := stages.NewSplit(i, bus, l, o.Limits, o.Now, o.Seed+uint64(2*i+1))
	if err != nil {
		return err
	}
	name := func(stage string) string { return fmt.Sprintf("set%d/%s", i, stage) }
	s.shake, s.split = stages.NewShake(l), split
	s.shake.RequestWindow(o.Limits.RequestWindow)
	s.egress = egress.New(i, bus, l, o.MaxPending, o.Now, o.Egress)
	if o.SlowAnswer != nil {
		s.egress.WatchSlow(o.SlowOver, o.SlowAnswer)
	}
	s.pids, s.jp = [2]int{-1, -1}, jp
	if j := o.Journal; j != nil {
		s.shake.Journal(jp[0])
		s.split.Journal(jp[1])
		s.egress.Journal(j)
		s.pids = [2]int{int(jp[0].ID()), int(jp[1].ID())}
	}
	lim := o.Limits
	if lim.ChatBacklog == 0 {
		lim.ChatBacklog = o.MaxPending / chatShare
	}
	s.session = stages.NewSession(i, bus, l, lim, o.Seed+uint64(2*i))
	s.add(s.session, name("session"), 0)
	s.add(s.shake, name("shake"), 0)
	s.add(split, name("split"), 0)
	s.add(s.egress, name("egress"), egressMaxBatch)
	return nil
}

// Replay applies the journal's records to the SETs' stages, before they
// run: each record of a SET's shake or split producer to that stage, and
// every record, the SETs' included, to other (the campaigns' progress is in
// the SETs' records), which may be nil. now is the recovery's time.
func Replay(j *journal.Journal, from journal.From, sets []*SET, now int64, other func(journal.Record) error) error {
	byPID := map[uint16]*SET{}
	for _, s := range sets {
		for _, pid := range s.pids {
			if pid >= 0 {
				byPID[uint16(pid)] = s
			}
		}
	}
	return j.Replay(from, func(r journal.Record) error {
		if s, ok := byPID[r.PID]; ok {
			if _, err := s.Apply(r, now); err != nil {
				return err
			}
		}
		if other != nil {
			return other(r)
		}
		return nil
	})
}

// Index is the SET's number.
func (s *SET) Index() int { return s.index }

// Apply applies one of the SET's journal records to its stage, before the
// SET runs; a record of another producer is not the SET's (false).
func (s *SET) Apply(r journal.Record, now int64) (bool, error) {
	return s.byProducer(r.PID, func() error { return s.shake.Restore(r, &s.ledger.Egress) }, func() error {
		if r.Type == stages.RecKeep || r.Type == stages.RecTake { // the session's, journalled by the split stage
			return s.session.Restore(r)
		}
		return s.split.Restore(r, now)
	})
}

// byProducer runs shake or split for the stage of journal producer pid; a
// producer of no stage of this SET's is not its (false).
func (s *SET) byProducer(pid uint16, shake, split func() error) (bool, error) {
	var err error
	switch int(pid) {
	case s.pids[0]:
		err = shake()
	case s.pids[1]:
		err = split()
	default:
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("set %d: %w", s.index, err)
	}
	return true, nil
}

// PIDs are the journal producers of the SET's shake and split stages (-1
// without a journal).
func (s *SET) PIDs() [2]int { return s.pids }

// Snapshots makes the SET's shake and split stages hand their state to out
// at every KSnapshot (on their goroutines).
func (s *SET) Snapshots(out func(stages.Part)) {
	s.shake.Snapshots(out)
	s.split.Snapshots(out)
}

// Load restores the SET's stages from their parts of a snapshot, by journal
// producer; a part of another producer is not the SET's (false).
func (s *SET) Load(pid uint16, data []byte, now int64) (bool, error) {
	return s.byProducer(pid, func() error { return s.shake.Load(data, &s.ledger.Egress) }, func() error {
		if err := s.split.Load(data, now); err != nil {
			return err
		}
		return s.session.LoadPending(s.split.Kept())
	})
}

// Dealt is what the SET's stages dealt for each campaign (snapshot and
// replay included), and the last shake envelope id dealt into it; read it
// only while the SET is stopped.
func (s *SET) Dealt() (shake, send map[uint32]*stages.Dealt, lastShake uint64) {
	shake, lastShake = s.shake.Tallies()
	return shake, s.split.Tallies(), lastShake
}

// Campaigns is what the SET holds of the campaigns: its shares and what
// its stages dealt; read it only while the SET is stopped.
func (s *SET) Campaigns() stages.Campaigns { return s.shake.Campaigns(s.split) }

// Build makes the bus between n SETs, and those of them run here (all but
// the ones o.Remote names) with their stages: both phases. The SETs are not
// started: bus.Ring(i).Start starts SET i.
func Build(n int, o Options) (*event.Bus, []*SET, error) {
	var sets []*SET
	ts := make([]event.Transport, n)
	for i := range ts {
		if o.Remote != nil {
			if ts[i] = o.Remote(i); ts[i] != nil {
				continue
			}
		}
		s, err := New(i, o)
		if err != nil {
			return nil, nil, err
		}
		sets, ts[i] = append(sets, s), s.Transport()
	}
	// Requests may fill a ring only to 7/8: the rest stays for answers and
	// overload replies, which must never be refused for room.
	bus := event.NewBus(ts, o.Ring/8)
	if o.Remote != nil {
		bus.SetRemote(o.Remote)
	}
	for _, s := range sets {
		if err := s.AddStages(bus); err != nil {
			return nil, nil, err
		}
	}
	return bus, sets, nil
}

// Ledgers returns the SETs' ledgers, in SET order.
func Ledgers(sets []*SET) []*ledger.Ledger {
	ls := make([]*ledger.Ledger, len(sets))
	for i, s := range sets {
		ls[i] = s.ledger
	}
	return ls
}

// newTransport returns an empty transport of o.Pipeline for one SET and how
// to add its stages, each after the one before.
func newTransport(o Options) (event.Transport, addStage, error) {
	to := transport.Options{Size: o.Ring, Stages: Stages}
	switch {
	case o.Pipeline == "disruptor":
		return comparison(transport.NewDisruptor[event.Event](to))
	case o.Pipeline == "chan":
		return comparison(transport.NewChan[event.Event](to))
	case !isRing(o.Pipeline):
		return nil, nil, fmt.Errorf("set: no pipeline %q: want ring, disruptor or chan", o.Pipeline)
	}
	r, err := ring.New[event.Event](ring.Options{Size: o.Ring, Producers: ring.MultiProducer, Wait: o.Wait, Spins: o.Spins, Yields: o.Yields,
		Fused: o.Fused})
	if err != nil {
		return nil, nil, err
	}
	var prev *ring.Stage[event.Event]
	return r, func(h ring.Handler[event.Event], name string, maxBatch int) {
		so := ring.StageOptions[event.Event]{Name: name, MaxBatch: maxBatch}
		if prev != nil {
			so.After = []*ring.Stage[event.Event]{prev}
		}
		prev = r.AddStage(h, so)
	}, nil
}

// comparison returns a transport of package transport and how to add its
// stages: in the order added.
func comparison[T interface {
	event.Transport
	AddStage(h ring.Handler[event.Event], o transport.StageOptions)
}](t T, err error) (event.Transport, addStage, error) {
	if err != nil {
		return nil, nil, err
	}
	return t, func(h ring.Handler[event.Event], name string, maxBatch int) {
		t.AddStage(h, transport.StageOptions{Name: name, MaxBatch: maxBatch})
	}, nil
}
