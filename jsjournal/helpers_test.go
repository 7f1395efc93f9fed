package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/journal"
)

// recTest is a record type for tests: the journal gives types no meaning.
const recTest = 0x7f

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial connects to url, reconnecting at once and buffering nothing
// meanwhile: a publish while it is down fails at once, a fate Commit
// resolves.
func dial(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testLayout is the tests' cluster on JetStream: 64 SETs, 3 gateways.
var testLayout = Layout{Prefix: DefaultPrefix, Sets: 64, Gateways: 3, Replicas: 1}

// provision makes url's JetStream hold l, as an operator would.
func provision(t testing.TB, url string, l Layout) {
	t.Helper()
	js, err := jetstream.New(dial(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(ctxT(t), js, l, false); err != nil {
		t.Fatal(err)
	}
}

// openStore provisions url (if need be) and opens gateway node's store,
// named gw-<node>, on testLayout unless mod changes it.
func openStore(t testing.TB, url string, node int, mod func(*Options)) *Store {
	t.Helper()
	o := Options{Conn: dial(t, url), Layout: testLayout, Node: node, Gateway: "gw-" + strconv.Itoa(node)}
	if mod != nil {
		mod(&o)
	}
	provision(t, url, o.Layout)
	s, err := Open(ctxT(t), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimed makes s claim group at epoch after its last message, and returns
// the claim's sequence: a writer's first append.
func claimed(t testing.TB, s *Store, group int, epoch uint64) uint64 {
	t.Helper()
	last, err := s.Last(ctxT(t), group)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.AppendClaim(ctxT(t), group, epoch, last.Seq)
	if err != nil {
		t.Fatal(err)
	}
	s.Own(group, epoch)
	return seq
}

// writer is a journal on a sink with producers in groups.
type writer struct {
	j  *journal.Journal
	ps map[int][]*journal.Producer // by group
}

// spec is how many producers each group has, in registration order.
type spec struct {
	group, producers int
}

func newWriter(t testing.TB, sink journal.Sink, groups []spec, mod func(*journal.Options)) *writer {
	t.Helper()
	o := journal.Options{Sink: sink, RingBytes: 1 << 14, RoundEvery: -1}
	if mod != nil {
		mod(&o)
	}
	j, err := journal.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{j: j, ps: map[int][]*journal.Producer{}}
	for _, g := range groups {
		for range g.producers {
			w.ps[g.group] = append(w.ps[g.group], j.ProducerIn(g.group))
		}
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return w
}

// rec is a record as the tests compare them.
type rec struct {
	typ     uint8
	pid     uint16
	payload string
}

func (r rec) String() string { return fmt.Sprintf("%d/%d/%q", r.typ, r.pid, r.payload) }

// perProducer keeps each producer's records in order: the guarantee across
// producers is only that each one's order holds.
func perProducer(rs []rec) map[uint16][]rec {
	m := map[uint16][]rec{}
	for _, r := range rs {
		m[r.pid] = append(m[r.pid], r)
	}
	return m
}

func equalPerProducer(t testing.TB, got, want []rec) {
	t.Helper()
	g, w := perProducer(got), perProducer(want)
	if len(g) != len(w) {
		t.Fatalf("records of %d producers; want %d\ngot  %v\nwant %v", len(g), len(w), got, want)
	}
	for pid, ws := range w {
		if !slices.Equal(g[pid], ws) {
			t.Fatalf("producer %d:\ngot  %v\nwant %v", pid, g[pid], ws)
		}
	}
}

// collect is a replay's fn that keeps every record.
func collect(into *[]rec) func(journal.Record) error {
	return func(r journal.Record) error {
		*into = append(*into, rec{r.Type, r.PID, string(r.Payload)})
		return nil
	}
}

// messages reads every message of subject now in the stream.
func messages(t testing.TB, s *Store, subject string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := ctxT(t)
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// records decodes a message's records.
func records(t testing.TB, data []byte) []rec {
	t.Helper()
	var out []rec
	for off := 0; off < len(data); {
		r, n, err := journal.Decode(data[off:])
		if err != nil {
			t.Fatalf("message record at %d: %v", off, err)
		}
		out = append(out, rec{r.Type, r.PID, string(r.Payload)})
		off += n
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}

// startJS runs a single-node JetStream under a temporary directory.
func startJS(t testing.TB) *embednats.Server {
	t.Helper()
	return embednats.StartTestJetStream(t, t.TempDir())
}

// startJSAt runs a single-node JetStream on dir and port (0: a free one),
// stopped at the test's end if it still runs: a restart on the same dir and
// port finds its streams.
func startJSAt(t testing.TB, dir string, port int) *embednats.Server {
	t.Helper()
	ns, err := embednats.StartJetStream(dir, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	return ns
}

// blackhole is a TCP proxy to a NATS server that can swallow what clients
// send (a message lost with a dying server) and cut every connection.
type blackhole struct {
	ln      net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	dropped atomic.Bool
}

func newBlackhole(t testing.TB, upstream string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(func() { ln.Close(); b.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, u)
			b.mu.Unlock()
			go b.pipe(u, c, true)
			go b.pipe(c, u, false)
		}
	}()
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

// pipe copies from src to dst; what clients send is dropped while swallowing.
func (b *blackhole) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !(fromClient && b.dropped.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (b *blackhole) swallow(on bool) { b.dropped.Store(on) }

// cut closes every connection through the proxy.
func (b *blackhole) cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
}
