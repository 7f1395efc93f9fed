package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"hongbao/journal"
)

// Headers of a message.
const (
	// HeaderGateway names the gateway that appended the message.
	HeaderGateway = "Hongbao-Gateway"
	// HeaderClaim marks a claim: its value is the owner's epoch.
	HeaderClaim = "Hongbao-Claim"
	// HeaderAfter is the sequence a round's message was appended after
	// (its expected last); HeaderRound, the writer's round: a writer that
	// lost the acknowledgement finds by them whether the subject's last
	// message is this very one.
	HeaderAfter = "Hongbao-After"
	HeaderRound = "Hongbao-Round"
)

// DefaultPrefix is Options.Prefix's default.
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
	// Prefix names the stream (<prefix>_journal), its subjects
	// (<prefix>.j.…) and the bucket (<prefix>_snapshots); default
	// DefaultPrefix.
	Prefix string
	// Gateway is this writer's name, in every message it appends.
	Gateway string
	// Replicas of the stream and the bucket (default 1: a single NATS
	// server; a cluster's gateways ask 3).
	Replicas int
	// AckWait bounds the wait for a round's acknowledgements (default
	// DefaultAckWait): past it the group fails (journal.Options.OnGroupFailed).
	AckWait time.Duration
}

// Store is the journal's stream and snapshot bucket on JetStream. Commit
// (the journal's Sink) runs on the journal's writer; every other method may
// be called from any goroutine.
type Store struct {
	o          Options
	js         jetstream.JetStream
	stream     jetstream.Stream
	obj        jetstream.ObjectStore
	name       string
	gw         []string // the Hongbao-Gateway header's value
	maxPayload int

	// The writer's: a round's futures, and its number (random at Open,
	// one more each round).
	futs     []jetstream.PubAckFuture
	round    uint64
	roundHdr []string // the round's Hongbao-Round value, shared by its messages
	// afterLast, in tests, runs in resolve between reading the last
	// message and publishing again: where an original still in flight lands.
	afterLast func(group int)
}

// Open creates the stream and the bucket, or opens them if they exist as
// asked — file storage, the replicas asked, no limit that drops a record, no
// message deleted but by a purge after a snapshot — and refuses them
// otherwise: one gateway of another -replicas must not change them for all.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Conn == nil || o.Gateway == "" {
		return nil, errors.New("jsjournal: a connection and a gateway name are needed")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	js, err := jetstream.New(o.Conn, jetstream.WithPublishAsyncTimeout(min(o.AckWait, resolveAfter)))
	if err != nil {
		return nil, fmt.Errorf("jsjournal: %w", err)
	}
	s := &Store{o: o, js: js, name: o.Prefix + "_journal", gw: []string{o.Gateway}}
	s.nextRound(rand.Uint64())
	s.stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              s.name,
		Description:       "hongbao: every SET's journal, a subject per SET",
		Subjects:          []string{o.Prefix + ".j.>"},
		Storage:           jetstream.FileStorage,
		Replicas:          o.Replicas,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		MaxMsgSize:        -1,
		Discard:           jetstream.DiscardNew, // full: refuse the append, never drop a record
		DenyDelete:        true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, fmt.Errorf("jsjournal: stream %s exists with another configuration (another -replicas?): every gateway of a cluster asks the same: %w", s.name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("jsjournal: stream %s: %w", s.name, err)
	}
	bucket := o.Prefix + "_snapshots"
	s.obj, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "hongbao: each SET's newest snapshot",
		Storage:     jetstream.FileStorage,
		Replicas:    o.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("jsjournal: bucket %s (exists with another configuration, such as another -replicas?): %w", bucket, err)
	}
	// A message is its records and its headers: keep room for the latter.
	s.maxPayload = int(o.Conn.MaxPayload()) - 1024
	return s, nil
}

// Stream is the stream's name.
func (s *Store) Stream() string { return s.name }

// Subject is group's subject: <prefix>.j.<set>, or <prefix>.j.cluster.
func (s *Store) Subject(group int) string { return s.o.Prefix + ".j." + groupName(group, "") }

// groupName is "cluster" or the SET's number, after set.
func groupName(group int, set string) string {
	if group == journal.ClusterGroup {
		return "cluster"
	}
	return set + strconv.Itoa(group)
}

// MaxBatch implements journal.Sink: the server's largest message, less room
// for its headers.
func (s *Store) MaxBatch() int { return s.maxPayload }

// Commit implements journal.Sink: one message per batch, each appended only
// if its subject's last sequence is the batch's ExpectLast, all published
// before the first acknowledgement is awaited. A message whose fate is
// unknown — the connection dropped, JetStream electing a leader, the
// acknowledgement later than resolveAfter — is resolved until AckWait:
// stored (the subject's last message is this writer's, after ExpectLast),
// or not (published again), or fenced.
func (s *Store) Commit(batches []journal.Batch) {
	deadline := time.Now().Add(s.o.AckWait)
	s.nextRound(s.round + 1)
	if cap(s.futs) < len(batches) {
		s.futs = make([]jetstream.PubAckFuture, len(batches))
	}
	futs := s.futs[:len(batches)]
	for i := range batches {
		b := &batches[i]
		// No retries: the journal reuses Data once Commit returns.
		f, err := s.js.PublishMsgAsync(s.message(b), jetstream.WithExpectLastSequencePerSubject(b.ExpectLast), jetstream.WithRetryAttempts(0))
		futs[i] = f
		if err != nil {
			b.Err = appendError(s.Subject(b.Group), err)
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
		}
		futs[i] = nil
		// Even a wrong last sequence is settled by reading: the server
		// also refuses so a message that comes while its subject's previous
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

// message is batch b's message.
func (s *Store) message(b *journal.Batch) *nats.Msg {
	return &nats.Msg{Subject: s.Subject(b.Group), Data: b.Data,
		Header: nats.Header{HeaderGateway: s.gw, HeaderAfter: {strconv.FormatUint(b.ExpectLast, 10)}, HeaderRound: s.roundHdr}}
}

// resolve settles the batches that failed (their message may or may not
// have been stored, or was refused) by reading their subject's last
// message, until deadline: each is stored, published again, or fenced —
// another writer's message follows ExpectLast — or keeps its error if it
// could not be settled.
func (s *Store) resolve(batches []journal.Batch, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pending := make([]bool, len(batches))
	for i := range batches {
		pending[i] = batches[i].Err != nil
	}
	for {
		left := 0
		for i := range batches {
			b := &batches[i]
			if !pending[i] {
				continue
			}
			try, cancelTry := context.WithTimeout(ctx, resolveAfter)
			last, err := s.Last(try, b.Group)
			switch {
			case err != nil:
				left++
			case last.Seq == b.ExpectLast: // not stored yet: again
				if s.afterLast != nil {
					s.afterLast(b.Group)
				}
				ack, err := s.js.PublishMsg(try, s.message(b), jetstream.WithExpectLastSequencePerSubject(b.ExpectLast), jetstream.WithRetryAttempts(0))
				if err == nil {
					b.Seq, b.Err, pending[i] = ack.Sequence, nil, false
				} else {
					// Refused for a wrong last sequence, it may be the
					// original, still in flight when the last was read,
					// that landed first: read again to know whose it is.
					b.Err = fmt.Errorf("jsjournal: appending to %s again: %v", s.Subject(b.Group), err)
					left++
				}
			case !last.Claim && last.Gateway == s.o.Gateway && last.After == b.ExpectLast && last.Round == s.round: // stored
				b.Seq, b.Err, pending[i] = last.Seq, nil, false
			default:
				who := last.Gateway
				if last.Claim {
					who += fmt.Sprintf("'s claim at epoch %d", last.Epoch)
				}
				b.Err = fmt.Errorf("%w: %s: message %d, after %d, is %s", journal.ErrFenced, s.Subject(b.Group), last.Seq, b.ExpectLast, who)
				pending[i] = false
			}
			cancelTry()
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
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

// Last is a group's last message.
type Last struct {
	Seq     uint64    // 0: the subject holds none
	Gateway string    // who appended it
	Claim   bool      // it is a claim
	Epoch   uint64    // the claim's epoch
	After   uint64    // the sequence a round's message was appended after
	Round   uint64    // its writer's round
	Time    time.Time // when the stream stored it, by the NATS server's clock
}

// Last reads group's last message, from the stream's leader: whoever
// reopens a group after a failure checks that it is still its own.
func (s *Store) Last(ctx context.Context, group int) (Last, error) {
	subject := s.Subject(group)
	m, err := s.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Last{}, nil
	}
	if err != nil {
		return Last{}, fmt.Errorf("jsjournal: the last message of %s: %w", subject, err)
	}
	l := Last{Seq: m.Sequence, Gateway: m.Header.Get(HeaderGateway), Time: m.Time}
	l.After, _ = strconv.ParseUint(m.Header.Get(HeaderAfter), 10, 64)
	l.Round, _ = strconv.ParseUint(m.Header.Get(HeaderRound), 10, 64)
	if c := m.Header.Get(HeaderClaim); c != "" {
		l.Claim = true
		if l.Epoch, err = strconv.ParseUint(c, 10, 64); err != nil {
			return Last{}, fmt.Errorf("jsjournal: %s, message %d: claim epoch %q: %w", subject, m.Sequence, c, err)
		}
	}
	return l, nil
}

// AppendClaim appends owner's claim of group at epoch, if the subject's last
// message is still expectLast (what the claimant's replay read): the new
// owner's first append, after which the old owner's next is refused. It
// returns the claim's sequence, for journal.Journal.Reopen; an error that
// wraps journal.ErrFenced when someone appended since, so that the
// claimant loads the group again.
func (s *Store) AppendClaim(ctx context.Context, group int, owner string, epoch, expectLast uint64) (uint64, error) {
	subject := s.Subject(group)
	m := &nats.Msg{Subject: subject, Header: nats.Header{HeaderGateway: {owner}, HeaderClaim: {strconv.FormatUint(epoch, 10)},
		HeaderAfter: {strconv.FormatUint(expectLast, 10)}}}
	ack, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expectLast), jetstream.WithRetryAttempts(0))
	if err != nil {
		return 0, appendError(subject, err)
	}
	return ack.Sequence, nil
}
