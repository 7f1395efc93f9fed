package jsjournal

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// gate holds each round's Commit until the test lets it through, and
// reports each round's groups and sequences once acknowledged.
type gate struct {
	journal.Sink
	entered chan []int // the round's groups
	release chan struct{}
	acked   chan []journal.Batch
}

func newGate(s journal.Sink) *gate {
	return &gate{Sink: s, entered: make(chan []int, 16), release: make(chan struct{}), acked: make(chan []journal.Batch, 16)}
}

func (g *gate) Commit(bs []journal.Batch) {
	groups := make([]int, len(bs))
	for i, b := range bs {
		groups[i] = b.Group
	}
	g.entered <- groups
	<-g.release
	g.Sink.Commit(bs)
	g.acked <- append([]journal.Batch(nil), bs...)
}

// TestRoundOnePublishPerGroup: a round's records of several groups become
// one message per group, each holding its producers' records in order;
// their positions are durable only once the round's acknowledgements are
// in, and a Wait blocks until then.
func TestRoundOnePublishPerGroup(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	g := newGate(s)
	groups := []spec{{0, 2}, {1, 2}, {5, 1}}
	w := newWriter(t, g, groups, nil)
	for _, sp := range groups {
		if err := w.j.Reopen(sp.group, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A first round, held, so that everything appended meanwhile shares the
	// next.
	first := w.ps[0][0]
	pos0 := first.Append(recTest, []byte("first"))
	first.Publish()
	if got := <-g.entered; len(got) != 1 || got[0] != 0 {
		t.Fatalf("first round's groups %v; want [0]", got)
	}
	var want []rec
	type waitAt struct {
		p   *journal.Producer
		pos uint64
	}
	var last []waitAt
	for _, sp := range groups {
		for i, p := range w.ps[sp.group] {
			var pos uint64
			for k := range 3 + i {
				payload := fmt.Sprintf("g%d p%d r%d", sp.group, i, k)
				pos = p.Append(uint8(k+1), []byte(payload))
				want = append(want, rec{uint8(k + 1), p.ID(), payload})
			}
			p.Publish()
			last = append(last, waitAt{p, pos})
		}
	}
	g.release <- struct{}{}
	<-g.acked
	if err := first.Wait(pos0); err != nil { // the writer marks it durable once Commit returned
		t.Fatalf("the first round acknowledged: %v", err)
	}
	round := <-g.entered
	if len(round) != len(groups) {
		t.Fatalf("second round's groups %v; want one batch for each of %d groups", round, len(groups))
	}
	waited := make(chan error, len(last))
	for _, l := range last {
		if l.p.Durable(l.pos) {
			t.Fatalf("producer %d durable before its round was published", l.p.ID())
		}
		go func() { waited <- l.p.Wait(l.pos) }()
	}
	select {
	case err := <-waited:
		t.Fatalf("a Wait returned (%v) while its round was held", err)
	default:
	}
	g.release <- struct{}{}
	acked := <-g.acked
	for range last {
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range last {
		if !l.p.Durable(l.pos) {
			t.Fatalf("producer %d not durable after its round's ack", l.p.ID())
		}
	}
	var got []rec
	for _, b := range acked {
		if b.Err != nil {
			t.Fatalf("group %d: %v", b.Group, b.Err)
		}
		ms := messages(t, s, s.Subject(b.Group, 0))
		m := ms[len(ms)-1]
		if m.Sequence != b.Seq || m.Header.Get(HeaderGateway) != "gw-0" {
			t.Fatalf("group %d's last message %d from %q; want %d from gw-0", b.Group, m.Sequence, m.Header.Get(HeaderGateway), b.Seq)
		}
		wantMsgs := 1
		if b.Group == 0 {
			wantMsgs = 2 // the first round's
		}
		if len(ms) != wantMsgs {
			t.Fatalf("group %d: %d messages; want %d (one a round)", b.Group, len(ms), wantMsgs)
		}
		got = append(got, records(t, m.Data)...)
	}
	equalPerProducer(t, got, want)
	if n := w.j.M.Messages.Load(); n != 1+uint64(len(groups)) {
		t.Fatalf("%d messages counted; want %d", n, 1+len(groups))
	}
}

// TestFencing: a second writer's claim on a group fences the first: its next
// round is refused for that group only, its waiters get ErrFenced, its
// hook names the group, and nothing of it after the claim is in the
// stream; its other group goes on.
func TestFencing(t *testing.T) {
	ns := startJS(t)
	a := openStore(t, ns.URL(), 0, nil)
	b := openStore(t, ns.URL(), 1, nil)
	var fenced atomic.Int64
	fenced.Store(-100)
	wa := newWriter(t, a, []spec{{0, 1}, {1, 1}}, func(o *journal.Options) {
		o.OnFenced = func(g int, _ error) { fenced.Store(int64(g)) }
		o.OnGroupFailed = func(g int, err error) { t.Errorf("group %d failed: %v", g, err) }
	})
	for _, g := range []int{0, 1} {
		if err := wa.j.Reopen(g, claimed(t, a, g, 1)); err != nil {
			t.Fatal(err)
		}
	}
	p0, p1 := wa.ps[0][0], wa.ps[1][0]
	for _, p := range []*journal.Producer{p0, p1} {
		if err := p.Wait(p.Append(recTest, []byte("before"))); err != nil {
			t.Fatal(err)
		}
	}

	// b loads group 0 and claims it.
	var seen []rec
	r, err := b.Replay(ctxT(t), 0, Snapshot{}, collect(&seen))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || r.LastSeq == 0 {
		t.Fatalf("b replayed %v up to %d; want a's one record", seen, r.LastSeq)
	}
	claim, err := b.AppendClaim(ctxT(t), 0, 2, r.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendClaim(ctxT(t), 0, 3, r.LastSeq); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a claim expecting a stale last message: %v; want ErrFenced", err)
	}
	wb := newWriter(t, b, []spec{{0, 1}}, nil)
	if err := wb.j.Reopen(0, claim); err != nil {
		t.Fatal(err)
	}

	after0 := p0.Append(recTest, []byte("a after the claim"))
	after1 := p1.Append(recTest, []byte("a's other group"))
	p0.Publish()
	p1.Publish()
	if err := p0.Wait(after0); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a's waiter on the claimed group: %v; want ErrFenced", err)
	}
	if err := p1.Wait(after1); err != nil {
		t.Fatalf("a's other group: %v", err)
	}
	if g := fenced.Load(); g != 0 {
		t.Fatalf("OnFenced named group %d; want 0", g)
	}
	if !p0.Failed() || p1.Failed() || !wa.j.Lost(p0.ID(), after0) || wa.j.Lost(p1.ID(), after1) {
		t.Fatal("fenced group: its producer must report Failed and its record Lost, the other group neither")
	}
	if err := wa.j.GroupErr(0); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("GroupErr(0) = %v; want ErrFenced", err)
	}
	// Nothing of a's becomes durable in the fenced group again.
	more := p0.Append(recTest, []byte("a again"))
	p0.Publish()
	if err := p0.Wait(more); !errors.Is(err, journal.ErrFenced) || p0.Durable(more) {
		t.Fatalf("a's later record: %v, durable %v; want ErrFenced", err, p0.Durable(more))
	}

	pb := wb.ps[0][0]
	if err := pb.Wait(pb.Append(recTest, []byte("b's"))); err != nil {
		t.Fatal(err)
	}
	for _, m := range messages(t, a, a.l.SetFilter(0)) {
		if p, _ := a.l.parse(m.Subject); m.Sequence > claim && p.node != 1 {
			t.Fatalf("message %d after b's claim %d on %s", m.Sequence, claim, m.Subject)
		}
	}
	seen = nil
	r, err = a.Replay(ctxT(t), 0, Snapshot{}, collect(&seen))
	if err != nil {
		t.Fatal(err)
	}
	if want := []rec{{recTest, p0.ID(), "before"}, {recTest, pb.ID(), "b's"}}; fmt.Sprint(seen) != fmt.Sprint(want) || r.Owner != 1 || r.Epoch != 2 || r.Claims != 2 || r.Dropped != 0 {
		t.Fatalf("replay after the fence: %v, owner %d epoch %d claims %d dropped %d; want %v, gateway 1 at 2", seen, r.Owner, r.Epoch, r.Claims, r.Dropped, want)
	}
}

// TestUnavailable: with the JetStream server gone, a round fails for every
// group it touched: the hook names each, their waiters get the error and
// nothing becomes durable. With the server back, a group reopened at its
// last message goes on, and what was appended before the reopen stays
// lost.
func TestUnavailable(t *testing.T) {
	dir := t.TempDir()
	ns := startJSAt(t, dir, 0)
	port := ns.Port
	s := openStore(t, ns.URL(), 0, func(o *Options) { o.AckWait = 500e6 })
	failed := make(chan int, 8)
	w := newWriter(t, s, []spec{{0, 1}, {1, 1}}, func(o *journal.Options) {
		o.OnGroupFailed = func(g int, err error) { failed <- g }
		o.OnFenced = func(g int, _ error) { t.Errorf("group %d fenced", g) }
	})
	ps := []*journal.Producer{w.ps[0][0], w.ps[1][0]}
	for g, p := range ps {
		if err := w.j.Reopen(g, 0); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(p.Append(recTest, []byte("before"))); err != nil {
			t.Fatal(err)
		}
	}
	ns.Stop()
	var pos [2]uint64
	for g, p := range ps {
		pos[g] = p.Append(recTest, []byte("while down"))
		p.Publish()
	}
	for g, p := range ps {
		err := p.Wait(pos[g])
		var ge *journal.GroupError
		if !errors.As(err, &ge) || ge.Group != g || errors.Is(err, journal.ErrFenced) {
			t.Fatalf("group %d while JetStream is down: %v; want its group's failure", g, err)
		}
		if p.Durable(pos[g]) || !p.Failed() || !w.j.Lost(p.ID(), pos[g]) {
			t.Fatalf("group %d: a failed round's record durable, or its producer not failed", g)
		}
	}
	seen := map[int]bool{<-failed: true, <-failed: true}
	if !seen[0] || !seen[1] {
		t.Fatalf("OnGroupFailed for %v; want both groups", seen)
	}

	startJSAt(t, dir, port)
	nc := s.o.Conn
	eventually(t, "the journal's connection back", func() bool { return nc.Status() == nats.CONNECTED })
	for g, p := range ps {
		var last Last
		eventually(t, "the stream back", func() bool {
			var err error
			last, err = s.Last(ctxT(t), g)
			return err == nil
		})
		if last.Node != 0 || last.Claim {
			t.Fatalf("group %d's last message from gateway %d (claim %v); want gateway 0's", g, last.Node, last.Claim)
		}
		if err := w.j.Reopen(g, last.Seq); err != nil {
			t.Fatal(err)
		}
		if p.Failed() {
			t.Fatalf("group %d reopened, its producer failed", g)
		}
		if err := p.Wait(pos[g]); !errors.Is(err, journal.ErrReopened) || p.Durable(pos[g]) {
			t.Fatalf("group %d: a record from before the reopen: %v; want ErrReopened", g, err)
		}
		after := p.Append(recTest, []byte("after "+strconv.Itoa(g)))
		if err := p.Wait(after); err != nil {
			t.Fatalf("group %d after the reopen: %v", g, err)
		}
		ms := messages(t, s, s.Subject(g, 0))
		if got := records(t, ms[len(ms)-1].Data); len(got) != 1 || got[0].payload != "after "+strconv.Itoa(g) {
			t.Fatalf("group %d's last message holds %v; want the record appended after the reopen", g, got)
		}
	}
}

// TestResolveUnknownFate: a round whose acknowledgement was lost is settled
// by the subject's last message. Stored: its sequence, not appended twice.
// Not stored: published again. Another writer's after it: fenced.
func TestResolveUnknownFate(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	lost := errors.New("nats: server is disconnected")
	// Stored, the acknowledgement lost.
	b := journal.Batch{Group: 0, Data: []byte("x"), ExpectLast: 0}
	ack, err := s.js.PublishMsg(ctxT(t), s.message(&b), jetstream.WithExpectLastSequenceForSubject(0, s.l.SetFilter(0)))
	if err != nil {
		t.Fatal(err)
	}
	b.Err = lost
	// Not stored at all.
	c := journal.Batch{Group: 1, Data: []byte("y"), ExpectLast: 0, Err: lost}
	bs := []journal.Batch{b, c}
	s.resolve(bs, time.Now().Add(5*time.Second))
	if bs[0].Err != nil || bs[0].Seq != ack.Sequence {
		t.Errorf("stored, ack lost: seq %d err %v; want %d, nil", bs[0].Seq, bs[0].Err, ack.Sequence)
	}
	if bs[1].Err != nil || bs[1].Seq == 0 {
		t.Errorf("not stored: seq %d err %v; want published again", bs[1].Seq, bs[1].Err)
	}
	if n := len(messages(t, s, s.Subject(0, 0))); n != 1 {
		t.Errorf("group 0 holds %d messages; want 1: the stored one not appended twice", n)
	}
	// Another writer appended after this one's unacknowledged message.
	other := openStore(t, ns.URL(), 1, nil)
	if _, err := other.AppendClaim(ctxT(t), 1, 2, bs[1].Seq); err != nil {
		t.Fatal(err)
	}
	d := []journal.Batch{{Group: 1, Data: []byte("z"), ExpectLast: bs[1].Seq, Err: lost}}
	s.resolve(d, time.Now().Add(5*time.Second))
	if !errors.Is(d[0].Err, journal.ErrFenced) {
		t.Errorf("after another writer's claim: %v; want ErrFenced", d[0].Err)
	}
}

// TestResolveOriginalLandsLate: the original message of a round whose fate
// was unknown lands between the resolver's read of the subject's last
// message (not there yet) and its publishing again, which is then refused
// for a wrong last sequence: the round is stored, once — not fenced, which
// would stop a gateway no one took a SET from.
func TestResolveOriginalLandsLate(t *testing.T) {
	ns := startJS(t)
	s := openStore(t, ns.URL(), 0, nil)
	b := []journal.Batch{{Group: 0, Data: []byte("x"), ExpectLast: 0, Err: errors.New("nats: timeout")}}
	var landed uint64
	s.afterLast = func(group int) {
		if landed != 0 {
			return
		}
		ack, err := s.js.PublishMsg(ctxT(t), s.message(&b[0]), jetstream.WithExpectLastSequenceForSubject(0, s.l.SetFilter(0)))
		if err != nil {
			t.Fatal(err)
		}
		landed = ack.Sequence
	}
	s.resolve(b, time.Now().Add(5*time.Second))
	if b[0].Err != nil || b[0].Seq != landed {
		t.Fatalf("the original landed late as %d: seq %d, err %v; want it stored, not fenced", landed, b[0].Seq, b[0].Err)
	}
	if n := len(messages(t, s, s.Subject(0, 0))); n != 1 {
		t.Errorf("group 0 holds %d messages; want 1", n)
	}
}

// TestLostInFlight: a round's message is lost on its way while the
// connection stays up (the stream leader it was forwarded to died with it),
// so its acknowledgement never comes. The round is resolved by reading the
// subject, not by waiting out AckWait: it succeeds, stored exactly once.
func TestLostInFlight(t *testing.T) {
	ns := startJS(t)
	px := newBlackhole(t, fmt.Sprintf("127.0.0.1:%d", ns.Port))
	provision(t, ns.URL(), testLayout)
	s := openStore(t, "nats://"+px.addr(), 0, func(o *Options) { o.AckWait = 3 * resolveAfter })
	w := newWriter(t, s, []spec{{0, 1}}, func(o *journal.Options) {
		o.OnGroupFailed = func(g int, err error) { t.Errorf("group %d failed: %v", g, err) }
		o.OnFenced = func(g int, _ error) { t.Errorf("group %d fenced", g) }
	})
	p := w.ps[0][0]
	if err := w.j.Reopen(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(recTest, []byte("before"))); err != nil {
		t.Fatal(err)
	}
	px.swallow(true)
	pos := p.Append(recTest, []byte("lost on its way"))
	p.Publish()
	time.Sleep(200 * time.Millisecond)
	px.swallow(false)
	if err := p.Wait(pos); err != nil {
		t.Fatalf("a round lost in flight: %v; want it published again", err)
	}
	if n := len(messages(t, s, s.Subject(0, 0))); n != 2 {
		t.Fatalf("group 0 holds %d messages; want 2: the round stored once", n)
	}
}
