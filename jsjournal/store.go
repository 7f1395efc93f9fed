package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// Headers of a message. The writer is not among them: the subject names it
// (Layout), and only that gateway may publish there.
const (
	// HeaderGateway is the writer's name, for the operator: never trusted.
	HeaderGateway = "Hongbao-Gateway"
	// HeaderClaim marks a claim: its value is the owner's epoch.
	HeaderClaim = "Hongbao-Claim"
	// HeaderRelease marks a claim message as a release: the owner hands
	// the SET back, at the epoch of HeaderClaim.
	HeaderRelease = "Hongbao-Release"
	// HeaderRound is the writer's round: a writer that lost the
	// acknowledgement finds by it whether a message is this very one.
	HeaderRound = "Hongbao-Round"
)

// DefaultPrefix is Layout.Prefix's default.
const DefaultPrefix = "hongbao"

// DefaultAckWait is Options.AckWait's default.
// It outlasts a stream leader's election (4–9 s, twice that when a vote
// splits), which stalls every append meanwhile: a gateway that gave up
// sooner would stop for an outage that no other gateway can serve through.
const DefaultAckWait = 30 * time.Second

// resolveAfter is how long an acknowledgement is awaited before the
// message's fate is read from the stream instead: one published to a NATS
// server that died with it is never acknowledged, and waiting out AckWait
// for it would stall its SET as long.
const resolveAfter = 2 * time.Second

// Options configure a Store.
type Options struct {
	// Conn is the connection to publish on. A publish while it reconnects
	// may be buffered (nats.go's default) and sent after: a round whose
	// acknowledgement does not come within AckWait fails its group, and
	// whatever of it lands later is a record told to nobody, as a crash
	// after the write and before the answer.
	Conn *nats.Conn
	// Layout is what JetStream must hold, as an operator provisioned it
	// (Provision): Open checks it and refuses any difference. Its Prefix
	// defaults to DefaultPrefix, its Replicas to 1.
	Layout Layout
	// Node is this writer's node number, in every subject it appends to:
	// its NATS user may publish on those only.
	Node int
	// Gateway is this writer's name, for the operator.
	Gateway string
	// AckWait bounds the wait for a round's acknowledgements (default
	// DefaultAckWait): past it the group fails (journal.Options.OnGroupFailed)
	// — unless Hold says to wait on.
	AckWait time.Duration
	// Hold, asked whenever a round is still unsettled after AckWait, says
	// whether to wait another AckWait, reading the round's fate again;
	// nil: never. Stop ends the wait whatever it says.
	Hold func() bool
}

// Refusals count what a Store read from JetStream and refused, by kind
// (Refused): NATS proves who appended each message, and these were not
// what their writer may append, or not what a reader can use.
const (
	// RefusedUnfenced: a message appended without the SET's expected last
	// sequence — no gateway appends so; or one on a subject of no SET.
	RefusedUnfenced = iota
	// RefusedNotOwner: a round of a gateway that did not own the SET (by
	// the claims before it).
	RefusedNotOwner
	// RefusedClaim: a claim not one epoch after the SET's last, or a
	// release by a gateway that did not own the SET.
	RefusedClaim
	// RefusedSnapshot: a snapshot whose writer did not own the SET when it
	// was taken, or that does not decode.
	RefusedSnapshot
	refusedKinds
)

// RefusedNames name the kinds of Refusals, for /metrics.
var RefusedNames = [refusedKinds]string{"unfenced", "not_owner", "claim", "snapshot"}

// Store is the journal's stream and snapshot buckets on JetStream. Commit
// (the journal's Sink) runs on the journal's writer; every other method may
// be called from any goroutine.
type Store struct {
	o          Options
	l          Layout
	js         jetstream.JetStream
	stream     jetstream.Stream
	obj        jetstream.ObjectStore // this node's bucket
	gw         []string              // the Hongbao-Gateway header's value
	maxPayload int

	bucketMu sync.Mutex
	buckets  map[int]jetstream.ObjectStore // every node's, bound when first read

	stopped    context.Context // done once Stop: a round's waits end
	stop       context.CancelFunc
	roundSince atomic.Int64 // unix ns: when the round in Commit began; 0 between rounds

	refused [refusedKinds]atomic.Uint64
	epochs  []atomic.Uint64 // per SET: the epoch of this writer's claim (Own), 0 unknown

	// The writer's: a round's futures, and its number (random at Open,
	// one more each round).
	futs     []jetstream.PubAckFuture
	round    uint64
	roundHdr []string // the round's Hongbao-Round value, shared by its messages
	// afterLast, in tests, runs in resolve between reading the last
	// message and publishing again: where an original still in flight lands.
	afterLast func(group int)
}

// Open checks that JetStream holds the layout of o (the journal's stream,
// every gateway's snapshot bucket) and binds to them. It creates and
// changes nothing: an operator's identity does (Provision), and a gateway's
// may not; a difference is refused, named (ErrLayout).
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Conn == nil || o.Gateway == "" {
		return nil, errors.New("jsjournal: a connection and a gateway name are needed")
	}
	if o.Layout.Prefix == "" {
		o.Layout.Prefix = DefaultPrefix
	}
	if o.Layout.Replicas <= 0 {
		o.Layout.Replicas = 1
	}
	if o.Node < 0 || o.Node >= o.Layout.Gateways {
		return nil, fmt.Errorf("jsjournal: node %d of a layout of %d gateways", o.Node, o.Layout.Gateways)
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	js, err := jetstream.New(o.Conn, jetstream.WithPublishAsyncTimeout(min(o.AckWait, resolveAfter)))
	if err != nil {
		return nil, fmt.Errorf("jsjournal: %w", err)
	}
	if err := Check(ctx, js, o.Layout); err != nil {
		return nil, err
	}
	s := &Store{o: o, l: o.Layout, js: js, gw: []string{o.Gateway}, buckets: map[int]jetstream.ObjectStore{}, epochs: make([]atomic.Uint64, o.Layout.Sets)}
	s.stopped, s.stop = context.WithCancel(context.Background())
	s.nextRound(rand.Uint64())
	if s.stream, err = js.Stream(ctx, s.l.Stream()); err != nil {
		return nil, fmt.Errorf("jsjournal: stream %s: %w", s.l.Stream(), err)
	}
	if s.obj, err = s.bucket(ctx, o.Node); err != nil {
		return nil, err
	}
	// A message is its records and its headers: keep room for the latter.
	s.maxPayload = int(o.Conn.MaxPayload()) - 1024
	return s, nil
}

// bucket is node's snapshot bucket, bound once.
func (s *Store) bucket(ctx context.Context, node int) (jetstream.ObjectStore, error) {
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if b := s.buckets[node]; b != nil {
		return b, nil
	}
	b, err := s.js.ObjectStore(ctx, s.l.Bucket(node))
	if err != nil {
		return nil, fmt.Errorf("jsjournal: bucket %s: %w", s.l.Bucket(node), err)
	}
	s.buckets[node] = b
	return b, nil
}

// Stream is the stream's name.
func (s *Store) Stream() string { return s.l.Stream() }

// Layout is the layout the Store checked.
func (s *Store) Layout() Layout { return s.l }

// Refused is how many messages and snapshots of kind k (Refused…) this
// Store refused.
func (s *Store) Refused(k int) uint64 { return s.refused[k].Load() }

// refuse counts one refusal of kind k.
func (s *Store) refuse(k int) { s.refused[k].Add(1) }

// Stalled is how long the round under way has waited for JetStream (0
// between rounds).
func (s *Store) Stalled() time.Duration {
	at := s.roundSince.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// Stop ends every wait of a round for JetStream now and from now on: the
// rounds whose fate is not known fail. A gateway stopping while cut off
// from NATS stops so, rather than wait for it.
func (s *Store) Stop() { s.stop() }

// Own tells the writer that it owns set at epoch, by its claim: an append
// after a claim of another gateway's at the next epoch is fenced, and one
// after any other claim (out of turn: refused by every reader) is not.
func (s *Store) Own(set int, epoch uint64) { s.epochs[set].Store(epoch) }

// Subject is this writer's subject for group's rounds of generation gen.
func (s *Store) Subject(group int, gen uint8) string { return s.l.RecordSubject(group, s.o.Node, gen) }

// MaxBatch implements journal.Sink: the server's largest message, less room
// for its headers.
func (s *Store) MaxBatch() int { return s.maxPayload }

// Commit implements journal.Sink: one message per batch, each appended only
// if the last message of its SET (any gateway's) is the batch's ExpectLast,
// all published before the first acknowledgement is awaited. A message
// whose fate is unknown — the connection dropped, JetStream electing a
// leader, the acknowledgement later than resolveAfter — is resolved until
// AckWait: stored, or not (published again), or fenced.
func (s *Store) Commit(batches []journal.Batch) {
	start := time.Now()
	s.roundSince.Store(start.UnixNano())
	defer s.roundSince.Store(0)
	deadline := start.Add(s.o.AckWait)
	s.nextRound(s.round + 1)
	if cap(s.futs) < len(batches) {
		s.futs = make([]jetstream.PubAckFuture, len(batches))
	}
	futs := s.futs[:len(batches)]
	for i := range batches {
		b := &batches[i]
		if b.Group < 0 || b.Group >= s.l.Sets {
			b.Err = fmt.Errorf("jsjournal: group %d is no SET of %d: only SETs are journalled on JetStream", b.Group, s.l.Sets)
			futs[i] = nil
			continue
		}
		// No retries: the journal reuses Data once Commit returns.
		f, err := s.js.PublishMsgAsync(s.message(b), jetstream.WithExpectLastSequenceForSubject(b.ExpectLast, s.l.SetFilter(b.Group)), jetstream.WithRetryAttempts(0))
		futs[i] = f
		if err != nil {
			b.Err = appendError(s.Subject(b.Group, b.Gen), err)
		}
	}
	unsure := false
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			batches[i].Seq = ack.Sequence
		case err := <-f.Err():
			batches[i].Err = appendError(f.Msg().Subject, err)
		case <-s.stopped.Done():
			batches[i].Err = fmt.Errorf("jsjournal: appending to %s: the store stopped", f.Msg().Subject)
		}
		futs[i] = nil
		// Even a wrong last sequence is settled by reading: the server
		// also refuses so a message that comes while its SET's previous
		// one, acknowledged already, is still being applied.
		unsure = unsure || batches[i].Err != nil
	}
	if unsure {
		s.resolve(batches, deadline)
	}
}

// nextRound makes round the writer's round, its header formatted once for
// every message of it.
func (s *Store) nextRound(round uint64) {
	s.round, s.roundHdr = round, []string{strconv.FormatUint(round, 10)}
}

// message is batch b's message: on this writer's subject of b's
// generation; a Rollup drops every earlier message of that subject.
func (s *Store) message(b *journal.Batch) *nats.Msg {
	m := &nats.Msg{Subject: s.Subject(b.Group, b.Gen), Data: b.Data, Header: nats.Header{HeaderGateway: s.gw, HeaderRound: s.roundHdr}}
	if b.Rollup {
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	return m
}

// resolve settles the batches that failed (their message may or may not
// have been stored, or was refused) by reading their SET's messages after
// ExpectLast, until deadline: each is stored, published again, or fenced —
// a claim of another gateway follows ExpectLast — or keeps its error if it
// could not be settled. Messages that fence no one — appended without the
// expected last sequence, or rounds of a gateway that does not own the SET —
// are refused and counted, and the batch goes on after them.
func (s *Store) resolve(batches []journal.Batch, deadline time.Time) {
	pending := make([]bool, len(batches))
	for i := range batches {
		pending[i] = batches[i].Err != nil && batches[i].Group >= 0 && batches[i].Group < s.l.Sets
	}
	// Held (Options.Hold), another AckWait at a time.
	for !s.resolveUntil(batches, pending, deadline) && s.stopped.Err() == nil && s.o.Hold != nil && s.o.Hold() {
		deadline = time.Now().Add(s.o.AckWait)
	}
}

// resolveUntil is resolve until deadline: true once every batch pending is
// settled.
func (s *Store) resolveUntil(batches []journal.Batch, pending []bool, deadline time.Time) bool {
	ctx, cancel := context.WithDeadline(s.stopped, deadline)
	defer cancel()
	for {
		left := 0
		for i := range batches {
			b := &batches[i]
			if !pending[i] {
				continue
			}
			try, cancelTry := context.WithTimeout(ctx, resolveAfter)
			fate, expect, err := s.fate(try, b)
			switch {
			case err != nil:
				b.Err = err
				left++
			case fate.stored:
				b.Seq, b.Err, pending[i] = fate.seq, nil, false
			case fate.fenced != nil:
				b.Err, pending[i] = fate.fenced, false
			default: // not stored, nothing fences it: again, after what is there now
				if s.afterLast != nil {
					s.afterLast(b.Group)
				}
				ack, err := s.js.PublishMsg(try, s.message(b), jetstream.WithExpectLastSequenceForSubject(expect, s.l.SetFilter(b.Group)), jetstream.WithRetryAttempts(0))
				if err == nil {
					b.Seq, b.Err, pending[i] = ack.Sequence, nil, false
				} else {
					// Refused for a wrong last sequence, it may be the
					// original, still in flight when the last was read,
					// that landed first: read again to know whose it is.
					b.Err = fmt.Errorf("jsjournal: appending to %s again: %v", s.Subject(b.Group, b.Gen), err)
					left++
				}
			}
			cancelTry()
		}
		if left == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fate is what became of a batch whose append may not have landed.
type fate struct {
	stored bool   // it is in the stream, at seq
	seq    uint64 //
	fenced error  // another gateway's claim or release follows its ExpectLast
}

// fateScan bounds the messages fate reads after a batch's ExpectLast: a
// gateway that appended that many since lost nothing but its patience.
const fateScan = 1024

// fate reads b's SET after b.ExpectLast: b itself (stored), a claim or
// release of another gateway (fenced), or neither; then it returns the
// sequence b may be appended after now (the SET's last message).
func (s *Store) fate(ctx context.Context, b *journal.Batch) (fate, uint64, error) {
	last, err := s.Last(ctx, b.Group)
	if err != nil {
		return fate{}, 0, err
	}
	if last.Seq == b.ExpectLast {
		return fate{}, last.Seq, nil
	}
	own := s.epochs[b.Group].Load()
	for seq, n := b.ExpectLast+1, 0; seq <= last.Seq; n++ {
		if n == fateScan {
			return fate{fenced: fmt.Errorf("%w: %s: more than %d messages after %d", journal.ErrFenced, s.l.SetFilter(b.Group), fateScan, b.ExpectLast)}, 0, nil
		}
		m, err := s.next(ctx, b.Group, seq)
		if err != nil {
			return fate{}, 0, err
		}
		if m.Seq == 0 || m.Seq > last.Seq {
			break
		}
		seq = m.Seq + 1
		switch {
		case m.Node == s.o.Node && !m.Claim && m.Fenced && m.After == b.ExpectLast && m.Round == s.round:
			return fate{stored: true, seq: m.Seq}, 0, nil
		case m.Node != s.o.Node && m.Claim && m.Fenced && !m.Release && (own == 0 || m.Epoch == own+1):
			return fate{fenced: fmt.Errorf("%w: %s: message %d, after %d, is gateway %d's claim at epoch %d", journal.ErrFenced,
				s.l.SetFilter(b.Group), m.Seq, b.ExpectLast, m.Node, m.Epoch)}, 0, nil
		case m.Node == s.o.Node && m.Fenced:
			// Its own, not this round's: another process of this node's
			// appended (two of one node number), or a round before ours
			// came late: either way the chain moved under it.
			return fate{fenced: fmt.Errorf("%w: %s: message %d, after %d, is another of this node's (%d)", journal.ErrFenced,
				s.l.SetFilter(b.Group), m.Seq, b.ExpectLast, m.Node)}, 0, nil
		default:
			// Fences no one: a message appended without the expected last
			// sequence, another gateway's round, a claim out of turn or a
			// release of a SET that gateway does not own.
			switch {
			case !m.Fenced:
				s.refuse(RefusedUnfenced)
			case m.Claim:
				s.refuse(RefusedClaim)
			default:
				s.refuse(RefusedNotOwner)
			}
		}
	}
	return fate{}, last.Seq, nil
}

// appendError names the subject an append failed on; a wrong last sequence
// wraps journal.ErrFenced.
func appendError(subject string, err error) error {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %s: %v", journal.ErrFenced, subject, err)
	}
	return fmt.Errorf("jsjournal: appending to %s: %w", subject, err)
}

// Msg is a message of a SET as a reader sees it: who appended it, as NATS
// proves by its subject, and whether NATS fenced it.
type Msg struct {
	Seq  uint64    // 0: none
	Set  int       //
	Node int       // the gateway that appended it: its subject's
	Name string    // the name it gave (HeaderGateway), for the operator
	Gen  uint8     // a round's generation
	Time time.Time // when the stream stored it, by the NATS server's clock
	// Fenced: appended only if the SET's last message was After (the
	// expected last sequence over the SET's subjects, which the server
	// checked and kept with it). Every gateway appends so; a message
	// without it was put there by someone else.
	Fenced  bool
	After   uint64
	Claim   bool   // a claim, or with Release a release
	Release bool   //
	Epoch   uint64 // the claim's epoch
	Round   uint64 // a round's writer's round
	Data    []byte
	// Valid: its subject is one of the layout's, its headers parse.
	Valid bool
}

// Last is a group's last message, from the stream's leader.
type Last = Msg

// parseMsg reads what a message of the stream says. A message whose
// subject or headers do not parse is returned with Valid false.
func (s *Store) parseMsg(subject string, seq uint64, h nats.Header, data []byte, at time.Time) Msg {
	m := Msg{Seq: seq, Time: at, Data: data, Name: h.Get(HeaderGateway)}
	p, ok := s.l.parse(subject)
	if !ok {
		return m
	}
	m.Set, m.Node, m.Claim, m.Gen = p.set, p.node, p.claim, p.gen
	if h.Get(jetstream.ExpectedLastSubjSeqSubjHeader) == s.l.SetFilter(p.set) {
		if after, err := strconv.ParseUint(h.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64); err == nil && after < seq {
			m.Fenced, m.After = true, after
		}
	}
	m.Round, _ = strconv.ParseUint(h.Get(HeaderRound), 10, 64)
	if m.Claim {
		epoch, err := strconv.ParseUint(h.Get(HeaderClaim), 10, 64)
		if err != nil || len(data) != 0 {
			return m
		}
		m.Epoch, m.Release = epoch, h.Get(HeaderRelease) != ""
	}
	m.Valid = true
	return m
}

// Last reads set's last message, any gateway's, from the stream's leader:
// whoever reopens a group after a failure checks that it is still its own.
func (s *Store) Last(ctx context.Context, set int) (Msg, error) {
	filter := s.l.SetFilter(set)
	m, err := s.stream.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Msg{}, nil
	}
	if err != nil {
		return Msg{}, fmt.Errorf("jsjournal: the last message of %s: %w", filter, err)
	}
	return s.parseMsg(m.Subject, m.Sequence, m.Header, m.Data, m.Time), nil
}

// next reads set's first message at or after seq (Seq 0: none).
func (s *Store) next(ctx context.Context, set int, seq uint64) (Msg, error) {
	filter := s.l.SetFilter(set)
	m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Msg{}, nil
	}
	if err != nil {
		return Msg{}, fmt.Errorf("jsjournal: the message of %s at or after %d: %w", filter, seq, err)
	}
	return s.parseMsg(m.Subject, m.Sequence, m.Header, m.Data, m.Time), nil
}

// get reads message seq, if it is set's (Seq 0: none).
func (s *Store) get(ctx context.Context, set int, seq uint64) (Msg, error) {
	m, err := s.next(ctx, set, seq)
	if err != nil || m.Seq != seq {
		return Msg{}, err
	}
	return m, nil
}

// AppendClaim appends this gateway's claim of set at epoch, if the SET's
// last message is still expectLast (what the claimant read): the new
// owner's first append, after which the old owner's next is refused. It
// returns the claim's sequence, for journal.Journal.Reopen; an error that
// wraps journal.ErrFenced when someone appended since, so that the
// claimant reads again.
func (s *Store) AppendClaim(ctx context.Context, set int, epoch, expectLast uint64) (uint64, error) {
	return s.appendClaim(ctx, set, epoch, expectLast, false)
}

// AppendRelease hands set back at epoch, if the SET's last message is still
// expectLast (this owner's last): no owner until another claims it, at
// epoch + 1. ErrFenced: someone appended since.
func (s *Store) AppendRelease(ctx context.Context, set int, epoch, expectLast uint64) (uint64, error) {
	return s.appendClaim(ctx, set, epoch, expectLast, true)
}

func (s *Store) appendClaim(ctx context.Context, set int, epoch, expectLast uint64, release bool) (uint64, error) {
	if set < 0 || set >= s.l.Sets {
		return 0, fmt.Errorf("jsjournal: SET %d of %d", set, s.l.Sets)
	}
	subject := s.l.ClaimSubject(set, s.o.Node)
	m := &nats.Msg{Subject: subject, Header: nats.Header{HeaderGateway: s.gw, HeaderClaim: {strconv.FormatUint(epoch, 10)}}}
	if release {
		m.Header.Set(HeaderRelease, "1")
	}
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(expectLast, s.l.SetFilter(set)), jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, appendError(subject, err)
	}
	return ack.Sequence, nil
}
