package server_test

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/internal/embednats"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// stall holds the journal's syncs of a server while it is held: its money
// answers wait, as through a stalled disk or JetStream.
type stall struct{ mu sync.RWMutex }

func (s *stall) hold()    { s.mu.Lock() }
func (s *stall) release() { s.mu.Unlock() }

// create is an Options.JournalCreate whose files sync only while s is not
// held.
func (s *stall) create(path string) (journal.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	return stalledFile{f, s}, err
}

type stalledFile struct {
	*os.File
	s *stall
}

func (f stalledFile) Sync() error {
	f.s.mu.RLock()
	defer f.s.mu.RUnlock()
	return f.File.Sync()
}

// shareRace is one user opening a group envelope on connection A, then
// logging in again on connection B (A is replaced: ERROR 5) and opening it
// again there, twice: the race in which a share was once told twice (A's
// answer, lost, gave the share back while B was told it; B's next OPEN drew
// another). Every answer that carries the share must carry the same one,
// and the ledger must count it once.
type shareRace struct {
	t      *testing.T
	send   func() uint64            // a new envelope from the sender to the opener, its id
	opener func() *client           // a new connection of the opener, logged in
	hold   func(func())             // runs the OPEN on A with the envelope's journal held, if set
	told   map[uint64]uint32        // by envelope: the share every answer told
	opened func() (uint64, uint64)  // shares and fen the cluster counts as opened
	drawn  func(uint64) func() bool // the envelope's SET drew its nth share
	lost   func() uint64            // hongbao_open_untold_total, where A's answer was lost
}

// run plays the race for one envelope.
func (r *shareRace) run(held bool, n uint64) {
	t := r.t
	t.Helper()
	a := r.opener() // replaces the last run's B
	env := r.send()
	a.push(proto.Envelope)
	sa := a.nextStamp()
	var b *client
	var sb uint64
	race := func() {
		a.send(proto.AppendOpen(nil, sa, env))
		if held {
			waitFor(t, "the share drawn for A's OPEN", r.drawn(n))
		}
		b = r.opener() // replaces A
		sb = b.nextStamp()
		b.send(proto.AppendOpen(nil, sb, env))
	}
	if held {
		r.hold(race)
	} else {
		race()
	}
	shares := map[uint32]bool{}
	st, _, amount := b.answer(sb).OpenResult()
	if st != proto.OpenOK && st != proto.OpenAlready {
		t.Fatalf("envelope %#x: B's OPEN answered %d; want 0 or 1", env, st)
	}
	shares[amount] = true
	// A: its answer, if it was written before the replacement, then ERROR 5.
	for {
		f, err := a.c.Next(waitTime)
		if err != nil {
			t.Fatalf("envelope %#x: A: %v before ERROR 5", env, err)
		}
		if f.Type == proto.Error {
			if f.ErrorCode() != proto.ErrCodeReplaced {
				t.Fatalf("envelope %#x: A got ERROR %d; want 5", env, f.ErrorCode())
			}
			break
		}
		if f.Type == proto.OpenResult && f.Stamp == sa {
			ast, _, share := f.OpenResult()
			if ast != proto.OpenOK {
				t.Fatalf("envelope %#x: A's OPEN answered %d; want 0", env, ast)
			}
			shares[share] = true
		}
	}
	for range 2 { // B again: the same share
		s := b.nextStamp()
		b.send(proto.AppendOpen(nil, s, env))
		st, _, share := b.answer(s).OpenResult()
		if st != proto.OpenAlready {
			t.Fatalf("envelope %#x: B's OPEN again answered %d; want 1 (already)", env, st)
		}
		shares[share] = true
	}
	if len(shares) != 1 {
		t.Fatalf("envelope %#x: the user was told shares %v; want one share, told again", env, shares)
	}
	r.told[env] = amount
}

// check compares the shares told with the ledger, and counts the answers
// that never reached A against want (-1: any).
func (r *shareRace) check(want int) {
	t := r.t
	t.Helper()
	var fen uint64
	for _, share := range r.told {
		fen += uint64(share)
	}
	if shares, amount := r.opened(); shares != uint64(len(r.told)) || amount != fen {
		t.Errorf("the ledger counts %d shares, %d fen opened; the user was told %d shares, %d fen", shares, amount, len(r.told), fen)
	}
	if lost := r.lost(); want >= 0 && lost != uint64(want) {
		t.Errorf("hongbao_open_untold_total %d; want %d: A's answers, found their connection replaced", lost, want)
	}
}

// TestShareToldOnce: on a server alone, whether the envelope lives in the
// opener's SET or another, a user who opens on one connection and again on
// a new one that replaces it is told one share, however the answers and
// the replacement interleave: raced back to back, or with A's answer held
// behind a stalled journal while B logs in and opens.
func TestShareToldOnce(t *testing.T) {
	for _, c := range []struct {
		name   string
		sender uint32
	}{{"same SET", 4}, {"another SET", 5}} { // the opener, user 8, is SET 0's of 4
		t.Run(c.name, func(t *testing.T) {
			var st stall
			ts := startServer(t, func(o *server.Options) {
				o.JournalCreate, o.SendBurst = st.create, 100
			})
			sender := login(t, ts, c.sender)
			const opener = 8
			r := &shareRace{t: t, told: map[uint64]uint32{},
				send: func() uint64 {
					s := sender.nextStamp()
					sender.send(proto.AppendSend(nil, s, 1000, []uint32{opener, 12}))
					ok, env := sender.answer(s).SendAck()
					if ok != proto.SendOK {
						t.Fatalf("SEND: status %d", ok)
					}
					return env
				},
				opener: func() *client { return login(t, ts, opener) },
				hold: func(f func()) {
					st.hold()
					defer st.release()
					f()
				},
				drawn: func(n uint64) func() bool { return func() bool { return ts.stats().Envelopes.Opened >= n } },
				opened: func() (uint64, uint64) {
					e := ts.stats().Envelopes
					return e.Opened, e.OpenedAmount
				},
				lost: func() uint64 { return metric(t, ts, "hongbao_open_untold_total") },
			}
			for i := range 10 {
				r.run(true, uint64(i+1))
			}
			r.check(10) // each A's answer waited behind the stall and found A replaced
			for i := range 20 {
				r.run(false, uint64(11+i))
			}
			r.check(-1)
			checkEnvelopeLedger(t, ts.stats())
		})
	}
}

// TestClusterShareToldOnce: the same race on a cluster of two gateways, the
// envelope on the opener's gateway (local) or on the other (crossing: the
// share drawn there, its answer carried back), raced or held behind the
// envelope's gateway's stalled journal.
func TestClusterShareToldOnce(t *testing.T) {
	t.Parallel() // it waits on NATS and crossings, not on the CPU
	ns := embednats.StartTest(t)
	for _, c := range []struct {
		name   string
		sender uint32 // SET 1 (gateway 1, the opener's) or SET 0 (gateway 0)
		gw     int    // the envelope's gateway
	}{{"local", 3, 1}, {"crossing", 2, 0}} {
		t.Run(c.name, func(t *testing.T) {
			var st stall
			gws := startGateways(t, ns, 2, 2, func(o *server.Options) {
				o.ClusterTimeout = 5 * time.Second // the stall shorter than the bound: A and B are answered
				o.JournalCreate, o.SendBurst = st.create, 100
			})
			sender := login(t, gws[c.gw], c.sender)
			const opener = 1 // SET 1: gateway 1
			r := &shareRace{t: t, told: map[uint64]uint32{},
				send: func() uint64 {
					s := sender.nextStamp()
					sender.send(proto.AppendSend(nil, s, 1000, []uint32{opener, 5}))
					ok, env := sender.answer(s).SendAck()
					if ok != proto.SendOK {
						t.Fatalf("SEND: status %d", ok)
					}
					return env
				},
				opener: func() *client { return login(t, gws[1], opener) },
				hold: func(f func()) {
					st.hold()
					defer st.release()
					f()
				},
				drawn: func(n uint64) func() bool {
					return func() bool { return gws[c.gw].stats().Envelopes.Opened >= n }
				},
				opened: func() (uint64, uint64) {
					e := clusterStats(t, gws[0]).Envelopes
					return e.Opened, e.OpenedAmount
				},
				lost: func() uint64 {
					return metric(t, gws[0], "hongbao_open_untold_total") + metric(t, gws[1], "hongbao_open_untold_total")
				},
			}
			for i := range 10 {
				r.run(true, uint64(i+1))
			}
			r.check(10)
			for i := range 10 {
				r.run(false, uint64(11+i))
			}
			r.check(-1)
			checkEnvelopeLedger(t, clusterStats(t, gws[0]).Stats)
			if t.Failed() {
				t.Logf("shares told: %v", r.told)
			}
		})
	}
}
