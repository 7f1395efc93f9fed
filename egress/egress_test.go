package egress_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/egress"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// owner stands in for the ingress: it counts what egress asks of it.
type owner struct{ watched, shut, released atomic.Int64 }

func (o *owner) WatchWritable(*conn.Conn) { o.watched.Add(1) }
func (o *owner) Shutdown(c *conn.Conn)    { o.shut.Add(1); unix.Shutdown(c.FD, unix.SHUT_RDWR) }
func (o *owner) Release(*conn.Conn)       { o.released.Add(1) }

// setup returns an egress writing in mode, its
// counters, and a logged-in connection whose far end the test reads.
type setup struct {
	e     *egress.Egress
	l     *ledger.Ledger
	o     *owner
	c     *conn.Conn
	peer  int
	slots []event.Event
	skew  atomic.Int64 // added to the egress's clock
	bus   *event.Bus
	ring  *event.Ring // never started: what the egress sends its own SET stays in it
}

func newSetup(t *testing.T, mode egress.Mode, maxPending, sndbuf int) *setup {
	t.Helper()
	r, err := ring.New[event.Event](ring.Options{Size: 16, Producers: ring.MultiProducer}) // for KReturn only: never started
	if err != nil {
		t.Fatal(err)
	}
	bus := event.NewBus([]*event.Ring{r}, 0)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	if sndbuf > 0 {
		if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf); err != nil {
			t.Fatal(err)
		}
	}
	s := &setup{l: new(ledger.Ledger), o: new(owner), peer: fds[1], slots: make([]event.Event, 512), bus: bus, ring: r}
	s.c = &conn.Conn{FD: fds[0], Owner: s.o, User: 1}
	s.e = egress.New(0, bus, s.l, maxPending, func() int64 { return time.Now().UnixNano() + s.skew.Load() }, mode)
	s.batch(func(ev *event.Event) bool { // LOGIN: the SET's egress owns c from here
		ev.Kind, ev.Conn = event.KLogin, conn.HandleOf(s.c)
		ev.SetFrame(proto.AppendLoginAck(ev.Out[:0], 1, proto.LoginOK, 1))
		return false
	})
	return s
}

// batch hands egress one batch of events filled by fill, until fill says stop.
func (s *setup) batch(fill func(ev *event.Event) bool) {
	n := 0
	for {
		s.slots[n] = event.Event{}
		more := fill(&s.slots[n])
		n++
		if !more {
			break
		}
	}
	s.e.Handle(ring.BatchOf(s.slots, 0, int64(n-1)))
}

// pongs hands egress one batch of n PONG answers, stamps first, first+1, …,
// each timed from a request decoded now.
func (s *setup) pongs(first uint64, n int) {
	i := 0
	now := time.Now().UnixNano()
	s.batch(func(ev *event.Event) bool {
		ev.Kind, ev.Conn, ev.RecvNs = event.KAnswer, conn.HandleOf(s.c), now
		ev.SetFrame(proto.AppendPong(ev.Out[:0], first+uint64(i)))
		i++
		return i < n
	})
}

// read returns what the peer has received so far.
func (s *setup) read(t *testing.T) []byte {
	t.Helper()
	var out []byte
	b := make([]byte, 64<<10)
	for {
		n, err := unix.Read(s.peer, b)
		if n <= 0 || err != nil {
			return out
		}
		out = append(out, b[:n]...)
	}
}

// TestWriteEachFrame: a batch of answers to one connection costs one write
// with -egress=batch and one write per frame with -egress=frame, and the
// bytes are the same.
func TestWriteEachFrame(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   egress.Mode
		writes uint64 // for the LOGIN batch and then a batch of 2 PONGs
	}{{"batch", egress.Batch, 1 + 1}, {"frame", egress.EachFrame, 1 + 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, tc.mode, 256<<10, 0)
			s.pongs(10, 2)
			if got := s.l.Egress.Writes.Load(); got != tc.writes {
				t.Errorf("%d writes; want %d", got, tc.writes)
			}
			want := proto.AppendLoginAck(nil, 1, proto.LoginOK, 1)
			want = proto.AppendPong(want, 10)
			want = proto.AppendPong(want, 11)
			if got := s.read(t); !bytes.Equal(got, want) {
				t.Errorf("peer read %x; want %x", got, want)
			}
			if s.c.Out != nil || s.c.Dead || s.o.shut.Load() != 0 {
				t.Errorf("after the writes: Out %v, Dead %v, %d shutdowns; want no buffer, alive", s.c.Out, s.c.Dead, s.o.shut.Load())
			}
		})
	}
}

// TestRefusalBatch: a KAnswer whose Buf holds the ingress's "overloaded"
// answers is written as is and counted frame by frame; to a connection that
// is gone, each of them is counted dropped.
func TestRefusalBatch(t *testing.T) {
	s := newSetup(t, egress.Batch, 256<<10, 0)
	var refused []byte
	refused = proto.AppendShakeResult(refused, 5, proto.ShakeOverloaded, 0, 0)
	refused = proto.AppendShakeResult(refused, 6, proto.ShakeOverloaded, 0, 0)
	refused = proto.AppendChatAck(refused, 7, proto.ChatOverloaded, 9)
	answer := func() {
		s.batch(func(ev *event.Event) bool {
			ev.Kind, ev.Conn, ev.Buf = event.KAnswer, conn.HandleOf(s.c), bytebufferpool.Get()
			ev.Buf.B = append(ev.Buf.B[:0], refused...)
			return false
		})
	}
	answer()
	if got, want := s.read(t), append(proto.AppendLoginAck(nil, 1, proto.LoginOK, 1), refused...); !bytes.Equal(got, want) {
		t.Errorf("peer read %x; want %x", got, want)
	}
	frames := func(t proto.Type) uint64 { return s.l.Egress.Frames[ledger.FrameIndex(byte(t))].Load() }
	if frames(proto.ShakeResult) != 2 || frames(proto.ChatAck) != 1 {
		t.Errorf("%d SHAKE_RESULT and %d CHAT_ACK counted; want 2 and 1", frames(proto.ShakeResult), frames(proto.ChatAck))
	}
	if s.slots[0].Buf != nil {
		t.Error("the batch's Buf was not put back")
	}
	s.c.Dead = true // as after a failed write
	answer()
	if got := s.l.Egress.Dropped.Load(); got != 3 {
		t.Errorf("%d frames dropped for a dead connection; want 3", got)
	}
}

// TestWriteEachFrameBacklog: with -egress=frame a reader that does not read
// still gets the same treatment as with batches: on EAGAIN the rest waits
// (WatchWritable, no more writes), and past maxPending ERROR 6 and a
// shutdown, once.
func TestWriteEachFrameBacklog(t *testing.T) {
	for _, mode := range []egress.Mode{egress.Batch, egress.EachFrame} {
		eachFrame := mode == egress.EachFrame
		t.Run(map[bool]string{false: "batch", true: "frame"}[eachFrame], func(t *testing.T) {
			const maxPending = 8 << 10
			s := newSetup(t, mode, maxPending, 4096)
			before := s.l.Egress.Writes.Load()
			frames, batches := 0, 0
			for ; !s.c.Watching && batches < 1000; batches++ { // until the socket is full
				s.pongs(100, 400)
				frames += 400
			}
			if s.o.watched.Load() != 1 || !s.c.Watching || s.c.Dead {
				t.Fatalf("after filling the socket: watched %d, Watching %v, Dead %v; want 1, true, false",
					s.o.watched.Load(), s.c.Watching, s.c.Dead)
			}
			// Frame by frame, every frame was written by itself until EAGAIN,
			// and none after; batched, one write per batch (two for the one
			// that filled the socket).
			writes := int(s.l.Egress.Writes.Load() - before)
			if eachFrame && (writes <= frames-400 || writes > frames) || !eachFrame && writes > batches+1 {
				t.Errorf("%d writes for %d frames in %d batches", writes, frames, batches)
			}
			w := s.l.Egress.Writes.Load()
			s.pongs(500, 400)
			if got := s.l.Egress.Writes.Load(); got != w {
				t.Errorf("%d more writes while waiting for writability; want 0", got-w)
			}
			for i := 0; !s.c.Dead && i < 100; i++ {
				s.pongs(1000, 400)
			}
			if !s.c.Dead || !s.c.Draining || s.l.Egress.CutOff.Load() != 1 || s.o.shut.Load() != 0 {
				t.Fatalf("past the backlog limit: Dead %v, Draining %v, cut off %d, %d shutdowns; want true, true, 1, 0",
					s.c.Dead, s.c.Draining, s.l.Egress.CutOff.Load(), s.o.shut.Load())
			}
			errorFrame := proto.AppendError(nil, 0, proto.ErrCodeTooSlow)
			if !bytes.HasSuffix(s.c.Out.B, errorFrame) {
				t.Error("no ERROR 6 at the end of the backlog")
			}
			// The reader catches up: it gets the whole backlog, ERROR 6
			// last, and only then is the socket shut down.
			var got []byte
			for i := 0; s.c.Draining && i < 1000; i++ {
				got = append(got, s.read(t)...)
				s.pongs(2000, 1) // dropped: cut off
				s.batch(func(ev *event.Event) bool {
					ev.Kind, ev.Conn = event.KWritable, conn.HandleOf(s.c)
					return false
				})
			}
			got = append(got, s.read(t)...)
			if s.c.Draining || s.o.shut.Load() != 1 || !bytes.HasSuffix(got, errorFrame) {
				t.Errorf("after the reader caught up: Draining %v, %d shutdowns, ERROR 6 last: %v; want false, 1, true",
					s.c.Draining, s.o.shut.Load(), bytes.HasSuffix(got, errorFrame))
			}
		})
	}
}

// TestCutOffDrainEnds: a cut-off connection whose reader never makes room is
// shut down drainMax after the cut-off, with its backlog still unwritten.
func TestCutOffDrainEnds(t *testing.T) {
	s := newSetup(t, egress.Batch, 8<<10, 4096)
	for i := 0; !s.c.Dead && i < 1000; i++ {
		s.pongs(1, 400)
	}
	if !s.c.Draining || s.o.shut.Load() != 0 {
		t.Fatalf("cut off: Draining %v, %d shutdowns; want true, 0", s.c.Draining, s.o.shut.Load())
	}
	// Its session is told (KCutOff), and the SET is ticked even when idle.
	kinds := func() (k []event.Kind) { // the ring's slots start zeroed, from sequence 0
		for seq := int64(0); seq < 16 && s.ring.At(seq).Kind != 0; seq++ {
			k = append(k, s.ring.At(seq).Kind)
		}
		return k
	}
	s.bus.Tick()
	if k := kinds(); len(k) != 2 || k[0] != event.KCutOff || k[1] != event.KTick {
		t.Fatalf("the egress's own SET got %v; want [cut_off tick]", k)
	}
	tick := func() {
		s.batch(func(ev *event.Event) bool { ev.Kind = event.KTick; return false })
	}
	tick()
	if s.o.shut.Load() != 0 {
		t.Fatal("shut down before its time was up")
	}
	s.skew.Add(int64(3 * time.Second))
	tick()
	if s.c.Draining || s.o.shut.Load() != 1 || s.c.Out == nil {
		t.Errorf("after its time: Draining %v, %d shutdowns, backlog kept %v; want false, 1, true",
			s.c.Draining, s.o.shut.Load(), s.c.Out != nil)
	}
}

// TestAllocsPerBatch: writing answers allocates nothing in steady state,
// batched or frame by frame, nor do CHAT_DELIVERs and the backlog they are
// counted in.
func TestAllocsPerBatch(t *testing.T) {
	if raceEnabled || testing.CoverMode() != "" {
		t.Skip("instrumentation allocates")
	}
	text := make([]byte, 100)
	for _, mode := range []egress.Mode{egress.Batch, egress.EachFrame} {
		s := newSetup(t, mode, 256<<10, 0)
		b := make([]byte, 4096)
		for name, run := range map[string]func(){
			"PONGs": func() { s.pongs(1, 8); unix.Read(s.peer, b) },
			"chats": func() { s.chats(8, text); unix.Read(s.peer, b) },
		} {
			run()
			if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
				t.Errorf("mode %d, %s: %v allocations per batch; want 0", mode, name, allocs)
			}
		}
	}
}

// TestLatencyByRequestType: each answer's latency is counted under the type
// of the request it answers, whether the answer was made in this SET or
// arrived from another (KAnswer); the ingress's refusals are not counted.
func TestLatencyByRequestType(t *testing.T) {
	s := newSetup(t, egress.Batch, 256<<10, 0)
	h := conn.HandleOf(s.c)
	answers := []struct {
		kind event.Kind
		enc  func(dst []byte) []byte
		want event.Kind
	}{
		{event.KLogin, func(b []byte) []byte { return proto.AppendLoginAck(b, 1, proto.LoginOK, 1) }, event.KLogin},
		{event.KShake, func(b []byte) []byte { return proto.AppendShakeResult(b, 2, proto.ShakeNothing, 0, 0) }, event.KShake},
		{event.KAnswer, func(b []byte) []byte { return proto.AppendOpenResult(b, 3, proto.OpenNoSuch, 7, 0) }, event.KOpen},
		{event.KSend, func(b []byte) []byte { return proto.AppendSendAck(b, 4, proto.SendInvalid, 0) }, event.KSend},
		{event.KAnswer, func(b []byte) []byte { return proto.AppendChatAck(b, 5, proto.ChatOffline, 9) }, event.KChat},
		{event.KPing, func(b []byte) []byte { return proto.AppendPong(b, 6) }, event.KPing},
	}
	i := 0
	s.batch(func(ev *event.Event) bool {
		a := answers[i]
		ev.Kind, ev.Conn, ev.RecvNs = a.kind, h, time.Now().UnixNano()-int64(time.Millisecond)
		ev.SetFrame(a.enc(ev.Out[:0]))
		i++
		return i < len(answers)
	})
	s.batch(func(ev *event.Event) bool { // refusals, timed by no one
		ev.Kind, ev.Conn, ev.RecvNs, ev.Buf = event.KAnswer, h, time.Now().UnixNano(), bytebufferpool.Get()
		ev.Buf.B = proto.AppendShakeResult(ev.Buf.B[:0], 8, proto.ShakeOverloaded, 0, 0)
		return false
	})
	for _, a := range answers {
		var n uint64
		for b := range ledger.LatencyBuckets {
			n += s.l.Egress.LatencyBuckets[a.want-event.KLogin][b].Load()
		}
		if sum := s.l.Egress.LatencySumNs[a.want-event.KLogin].Load(); n != 1 || sum < uint64(time.Millisecond) {
			t.Errorf("%v: %d latencies summing to %v; want 1 of at least 1ms", a.want, n, time.Duration(sum))
		}
	}
}

// WatchSlow hears of the slow answers held for the journal too: a money
// answer is written, and timed, in the batch after its record is durable.
func TestWatchSlowGated(t *testing.T) {
	s := newSetup(t, egress.Batch, 256<<10, 0)
	j, err := journal.Open(journal.Options{Dir: t.TempDir(), Sets: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := j.Producer()
	s.e.Journal(j)
	var slow []int64
	s.e.WatchSlow(time.Millisecond, func(ns int64) { slow = append(slow, ns) })
	pos := p.Append(1, []byte("share"))
	p.Publish()
	h := conn.HandleOf(s.c)
	s.batch(func(ev *event.Event) bool { // held: the journal is not started, nothing is durable
		ev.Kind, ev.Conn, ev.RecvNs, ev.JPos = event.KAnswer, h, time.Now().UnixNano()-int64(5*time.Millisecond), pos
		ev.SetFrame(proto.AppendOpenResult(ev.Out[:0], 2, proto.OpenOK, 7, 100))
		return false
	})
	if len(slow) != 0 {
		t.Fatalf("slow answers %v reported before the held one was written", slow)
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if err := j.Wait(p.ID(), pos); err != nil {
		t.Fatal(err)
	}
	s.batch(func(ev *event.Event) bool { ev.Kind = event.KTick; return false })
	if len(slow) != 1 || slow[0] < int64(5*time.Millisecond) {
		t.Fatalf("slow answers %v; want one of at least 5ms, the held answer's", slow)
	}
}
