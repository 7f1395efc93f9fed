package stages_test

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ledger"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/set"
	"github.com/hongbao-io/hongbao/stages"
)

// pipeline is n SETs wired as the server wires them (session → shake →
// split → egress), without sockets to accept: the test plays the ingress and
// its "clients" are the far ends of socketpairs.
type pipeline struct {
	t       *testing.T
	bus     *event.Bus
	ledgers []*ledger.Ledger
	owner   *fakeOwner
}

func newPipeline(t *testing.T, sets, size int, lim stages.Limits, now func() int64) *pipeline {
	t.Helper()
	return newJournalled(t, sets, size, lim, now, false)
}

// newJournalled is newPipeline with, if journalled, a journal in a
// temporary directory: money answers wait for its syncs.
func newJournalled(t *testing.T, sets, size int, lim stages.Limits, now func() int64, journalled bool) *pipeline {
	t.Helper()
	var j *journal.Journal
	var p *pipeline
	if journalled {
		var err error
		j, err = journal.Open(journal.Options{Dir: t.TempDir(), Sets: sets, OnDurable: func() { p.bus.Tick() }})
		if err != nil {
			t.Fatal(err)
		}
	}
	bus, ss, err := set.Build(sets, set.Options{Ring: size, Limits: lim, MaxPending: 64 << 10, Now: now, Seed: 1, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	p = &pipeline{t: t, bus: bus, ledgers: set.Ledgers(ss), owner: &fakeOwner{bus: bus}}
	if j != nil {
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() }) // after the rings have closed: cleanups run last first
	}
	for i := range sets {
		if err := bus.Ring(i).Start(); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the server's ticker: held events are retried
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.bus.Tick()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		if err := p.bus.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// publish fills and publishes one event into set's ring, as the ingress does.
func (p *pipeline) publish(set int, fill func(ev *event.Event)) {
	r := p.bus.Ring(set)
	seq, err := r.Claim(1)
	if err != nil {
		p.t.Fatal(err)
	}
	ev := r.At(seq)
	*ev = event.Event{}
	fill(ev)
	r.Publish(seq, seq)
}

// client is the test's end of one user's connection.
type client struct {
	p    *pipeline
	user uint32
	c    *conn.Conn
	fd   int // the test's end
	buf  []byte
}

func (p *pipeline) login(user uint32) *client {
	p.t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	cl := &client{p: p, user: user, c: &conn.Conn{FD: fds[0], Owner: p.owner}, fd: fds[1]}
	unix.SetNonblock(fds[1], false)
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	cl.c.User, cl.c.SET = user, int32(p.bus.SETOf(user))
	p.publish(p.bus.SETOf(user), func(ev *event.Event) {
		ev.Kind, ev.User, ev.Conn, ev.Stamp = event.KLogin, user, conn.HandleOf(cl.c), 7
	})
	f := cl.expect(proto.LoginAck)
	if st, u := f.LoginAck(); st != proto.LoginOK || u != user || f.Stamp != 7 {
		p.t.Fatalf("LOGIN_ACK status %d user %d stamp %d; want 0 %d 7", st, u, f.Stamp, user)
	}
	p.t.Cleanup(func() { unix.Close(fds[1]) })
	return cl
}

// request publishes a request of kind k from cl into set (the user's SET if
// set < 0), as the ingress would after decoding it.
func (cl *client) request(k event.Kind, set int, stamp uint64, fill func(ev *event.Event)) {
	if set < 0 {
		set = cl.p.bus.SETOf(cl.user)
	}
	cl.p.publish(set, func(ev *event.Event) {
		ev.Kind, ev.User, ev.Conn, ev.Stamp, ev.RecvNs = k, cl.user, conn.HandleOf(cl.c), stamp, time.Now().UnixNano()
		if fill != nil {
			fill(ev)
		}
	})
}

func (cl *client) shake(stamp uint64) { cl.request(event.KShake, -1, stamp, nil) }

func (cl *client) open(env uint64, stamp uint64) {
	cl.request(event.KOpen, envelope.OwnerSET(env), stamp, func(ev *event.Event) { ev.Env = env })
}

func (cl *client) send(total uint32, rcpt []uint32, stamp uint64) {
	cl.request(event.KSend, -1, stamp, func(ev *event.Event) {
		ev.Total, ev.N = total, uint16(len(rcpt))
		ev.Buf = bytebufferpool.Get()
		for _, r := range rcpt {
			ev.Buf.B = binary.BigEndian.AppendUint32(ev.Buf.B, r)
		}
	})
}

func (cl *client) chat(to uint32, text string, stamp uint64) {
	cl.request(event.KChat, cl.p.bus.SETOf(to), stamp, func(ev *event.Event) {
		ev.Peer = to
		ev.Buf = bytebufferpool.Get()
		ev.Buf.B = proto.AppendChatDeliver(ev.Buf.B, stamp, cl.user, []byte(text))
	})
}

// next reads the next frame sent to cl (5 s timeout).
func (cl *client) next() proto.Frame {
	cl.p.t.Helper()
	for {
		if f, n, err := proto.NextResponse(cl.buf); err != nil {
			cl.p.t.Fatalf("user %d: bad frame from server: %v", cl.user, err)
		} else if n > 0 {
			f.Body = append([]byte(nil), f.Body...)
			cl.buf = cl.buf[n:]
			return f
		}
		b := make([]byte, 4096)
		n, err := unix.Read(cl.fd, b)
		if err == unix.EINTR { // a signal (the runtime's preemption) cut the blocking read short
			continue
		}
		if err != nil || n == 0 {
			cl.p.t.Fatalf("user %d: read: n=%d err=%v (no frame within 5 s)", cl.user, n, err)
		}
		cl.buf = append(cl.buf, b[:n]...)
	}
}

// drain returns the frames already sent to cl, without waiting.
func (cl *client) drain() []proto.Frame {
	b := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(cl.fd, b, unix.MSG_DONTWAIT)
		if n <= 0 || err != nil {
			break
		}
		cl.buf = append(cl.buf, b[:n]...)
	}
	var out []proto.Frame
	for len(cl.buf) > 0 {
		out = append(out, cl.next())
	}
	return out
}

func (cl *client) expect(t proto.Type) proto.Frame {
	cl.p.t.Helper()
	f := cl.next()
	if f.Type != t {
		cl.p.t.Fatalf("user %d: got %v; want %v", cl.user, f.Type, t)
	}
	return f
}

// fakeOwner stands in for the ingress as the owner of test connections.
type fakeOwner struct {
	bus      *event.Bus
	released atomic.Int64
	watched  atomic.Int64
}

// WatchWritable waits for c to drain, then tells c's SET, as epoll would.
func (o *fakeOwner) WatchWritable(c *conn.Conn) {
	o.watched.Add(1)
	h, fd, set := conn.HandleOf(c), c.FD, int(c.SET) // read now: c may be released and recycled while it waits
	go func() {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		for {
			if n, err := unix.Poll(fds, 1000); n == 1 || (err != nil && err != unix.EINTR) {
				break
			}
		}
		r := o.bus.Ring(set)
		seq, err := r.Claim(1)
		if err != nil {
			return
		}
		*r.At(seq) = event.Event{Kind: event.KWritable, Conn: h}
		r.Publish(seq, seq)
	}()
}

func (o *fakeOwner) Shutdown(c *conn.Conn) { unix.Shutdown(c.FD, unix.SHUT_RDWR) }
func (o *fakeOwner) Release(c *conn.Conn) {
	unix.Close(c.FD)
	c.Recycle()
	o.released.Add(1)
}

// stats sums the SETs' counters.
func (p *pipeline) stats() ledger.Stats { return ledger.Sum(p.ledgers) }

// checkInvariants waits for the pipeline to go quiet, then checks
// docs/PROTOCOL.md's two ledger invariants exactly.
func (p *pipeline) checkInvariants() {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := p.stats()
		err := st.Check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}
