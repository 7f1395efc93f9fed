package jsjournal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/journal"
)

// Which gateway runs a SET is its last claim in its journal: a message on
// the claimant's own subject (Layout.ClaimSubject), appended only after the
// SET's last message as the claimant read it, so that of two claimants one
// wins and the old owner's next append is refused; its epoch one more than
// the claim before. A release hands the SET back at the same epoch. NATS
// proves who claimed: no gateway can claim, or release, as another. Every
// gateway follows every SET's claims (Claims).

// Claim is a SET's owner, as its last claim says.
type Claim struct {
	Node  int       // -1: none (never claimed, or released)
	Name  string    // the name its claim gave, for the operator
	Epoch uint64    // one more at every claim
	Seq   uint64    // the claim's (or release's) message; 0: none
	At    time.Time // when JetStream stored it
}

// Claims is this gateway's view of every SET's claims, kept from an ordered
// consumer of the claim subjects. Safe for concurrent use; Of is one atomic
// load.
type Claims struct {
	s   *Store
	log *slog.Logger

	owner  []atomic.Int32 // per SET: its owner's node, -1 none
	former []atomic.Int32 // per SET: the node that ran it before, -1 none
	mu     sync.Mutex
	claim  []Claim // per SET, under mu
	seen   uint64  // the last claim message read, under mu
	cond   *sync.Cond

	onChange func(set int, was, now Claim)
	ready    chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	err      error // why the watch stopped, once done
}

// Claims reads every SET's claims and follows them until Close: onChange
// (may be nil) runs on the watch's goroutine after a SET's owner changed,
// with the claim before and after. It returns once what the stream held
// when it began is read.
func (s *Store) Claims(ctx context.Context, log *slog.Logger, onChange func(set int, was, now Claim)) (*Claims, error) {
	if log == nil {
		log = slog.Default()
	}
	c := &Claims{s: s, log: log, owner: make([]atomic.Int32, s.l.Sets), former: make([]atomic.Int32, s.l.Sets),
		claim: make([]Claim, s.l.Sets), onChange: onChange, ready: make(chan struct{}), done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	for set := range c.owner {
		c.owner[set].Store(-1)
		c.former[set].Store(-1)
		c.claim[set].Node = -1
	}
	cons, err := s.js.OrderedConsumer(ctx, s.l.Stream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.l.ClaimsFilter()},
		InactiveThreshold: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("jsjournal: following the claims: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullHeartbeat(replayHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("jsjournal: following the claims: %w", err)
	}
	// The claims there now: the watch is ready once it has read up to the
	// last of them.
	var upTo uint64
	if m, err := s.stream.GetLastMsgForSubject(ctx, s.l.ClaimsFilter()); err == nil {
		upTo = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		it.Stop()
		return nil, fmt.Errorf("jsjournal: the last claim: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(wctx, cons, it, upTo)
	select {
	case <-c.ready:
		return c, nil
	case <-c.done:
		return nil, c.err
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("jsjournal: reading the claims: %w", ctx.Err())
	}
}

// run applies the claims until ctx ends.
func (c *Claims) run(ctx context.Context, cons jetstream.Consumer, it jetstream.MessagesContext, upTo uint64) {
	readyOnce := sync.OnceFunc(func() { close(c.ready) })
	if upTo == 0 {
		readyOnce()
	}
	defer close(c.done)
	defer c.s.dropReader(cons, it)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				c.mu.Lock()
				c.err = fmt.Errorf("jsjournal: following the claims: %w", err)
				c.cond.Broadcast()
				c.mu.Unlock()
			}
			return
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		c.apply(c.s.parseMsg(m.Subject(), md.Sequence.Stream, m.Headers(), m.Data(), md.Timestamp))
		if md.Sequence.Stream >= upTo {
			readyOnce()
		}
	}
}

// apply takes one claim message: a claim one epoch after its SET's last
// changes the owner, a release by the owner at its epoch leaves the SET
// without one; anything else is refused, counted and logged.
func (c *Claims) apply(m Msg) {
	c.mu.Lock()
	if m.Seq > c.seen {
		c.seen = m.Seq
	}
	defer c.cond.Broadcast()
	if !m.Valid || !m.Claim || !m.Fenced {
		c.mu.Unlock()
		c.s.refuse(RefusedUnfenced)
		c.log.Warn("jsjournal: a claim message refused: appended without its SET's last sequence, or not a claim", "seq", m.Seq, "node", m.Node, "set", m.Set)
		return
	}
	was := c.claim[m.Set]
	now, why := next(was, m)
	if why != "" {
		c.mu.Unlock()
		c.s.refuse(RefusedClaim)
		c.log.Warn("jsjournal: a claim refused: "+why, "set", m.Set, "node", m.Node, "epoch", m.Epoch, "seq", m.Seq, "owner", was.Node, "owner_epoch", was.Epoch)
		return
	}
	c.claim[m.Set] = now
	if was.Node >= 0 && was.Node != now.Node {
		c.former[m.Set].Store(int32(was.Node))
	}
	c.owner[m.Set].Store(int32(now.Node))
	c.mu.Unlock()
	if c.onChange != nil && was.Node != now.Node {
		c.onChange(m.Set, was, now)
	}
}

// next is the SET's claim after was once claim message m is applied, or
// why m is refused: a claim must be one epoch after was, a release the
// owner's at its epoch.
func next(was Claim, m Msg) (Claim, string) {
	switch {
	case m.Release && (m.Node != was.Node || m.Epoch != was.Epoch):
		return was, fmt.Sprintf("a release by gateway %d at epoch %d of a SET it does not own", m.Node, m.Epoch)
	case m.Release:
		return Claim{Node: -1, Epoch: m.Epoch, Seq: m.Seq, At: m.Time}, ""
	case m.Epoch != was.Epoch+1:
		return was, fmt.Sprintf("a claim at epoch %d after epoch %d: not the next", m.Epoch, was.Epoch)
	}
	return Claim{Node: m.Node, Name: m.Name, Epoch: m.Epoch, Seq: m.Seq, At: m.Time}, ""
}

// Of returns the node that runs set, -1 for none.
func (c *Claims) Of(set int) int { return int(c.owner[set].Load()) }

// Former returns the node that ran set before its owner of the moment, -1
// for none: what it sent for the SET before it learnt is stale, not forged.
func (c *Claims) Former(set int) int { return int(c.former[set].Load()) }

// Get returns set's claim.
func (c *Claims) Get(set int) Claim {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claim[set]
}

// caughtUp waits until the watch has read every claim message up to seq
// (or ctx ends, or the watch stopped).
func (c *Claims) caughtUp(ctx context.Context, seq uint64) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.seen < seq {
		if c.err != nil {
			return c.err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("jsjournal: the claims read up to %d, not %d: %w", c.seen, seq, err)
		}
		c.cond.Wait()
	}
	return nil
}

// Current is set's claim as JetStream holds it now: the watch caught up
// with the SET's last claim message, read afresh.
func (c *Claims) Current(ctx context.Context, set int) (Claim, error) {
	lc, err := c.s.lastClaim(ctx, set)
	if err != nil {
		return Claim{}, err
	}
	if err := c.caughtUp(ctx, lc); err != nil {
		return Claim{}, err
	}
	return c.Get(set), nil
}

// ErrClaimLost is Claim's error when another gateway claimed the SET
// first, or appended to it first, tries after tries.
var ErrClaimLost = errors.New("jsjournal: another gateway claimed or appended to the SET first")

// Claim claims set for this gateway from the claim at epoch from — the
// owner the caller decided to replace (Get's epoch then): at epoch from+1,
// after the SET's last message as read now, so that the old owner's next
// append is refused. It returns the claim. Once the SET's last claim is
// another than from's (someone claimed it meanwhile), it claims nothing
// (ErrClaimLost): a gateway never takes a SET from an owner it did not
// judge. If expectLast is non-zero the claim goes only right after that
// message (a move: the source's last), else it reads the last again when
// someone appends meanwhile, a few times, then gives up (ErrClaimLost).
func (c *Claims) Claim(ctx context.Context, set int, from, expectLast uint64) (Claim, error) {
	s := c.s
	for try := 0; ; try++ {
		last := expectLast
		if last == 0 {
			m, err := s.Last(ctx, set)
			if err != nil {
				return Claim{}, err
			}
			last = m.Seq
		}
		// The epoch follows the SET's last valid claim up to last: the
		// watch must have read the last claim message before it.
		lc, err := s.lastClaim(ctx, set)
		if err != nil {
			return Claim{}, err
		}
		if lc > last { // claimed since last was read
			if expectLast != 0 || try == 9 {
				return Claim{}, fmt.Errorf("%w: a claim at %d follows %d", ErrClaimLost, lc, last)
			}
			continue
		}
		if err := c.caughtUp(ctx, lc); err != nil {
			return Claim{}, err
		}
		if was := c.Get(set); was.Epoch != from {
			return Claim{}, fmt.Errorf("%w: claimed at epoch %d by gateway %d (%s) since epoch %d", ErrClaimLost, was.Epoch, was.Node, was.Name, from)
		}
		seq, err := s.AppendClaim(ctx, set, from+1, last)
		if err == nil {
			return Claim{Node: s.o.Node, Name: s.o.Gateway, Epoch: from + 1, Seq: seq, At: time.Now()}, nil
		}
		if !errors.Is(err, journal.ErrFenced) {
			return Claim{}, err
		}
		if expectLast != 0 || try == 9 {
			return Claim{}, fmt.Errorf("%w: %v", ErrClaimLost, err)
		}
	}
}

// lastClaim is the sequence of set's last claim message, 0 for none.
func (s *Store) lastClaim(ctx context.Context, set int) (uint64, error) {
	filter := s.l.Prefix + ".j." + strconv.Itoa(set) + ".*." + kindClaim
	m, err := s.stream.GetLastMsgForSubject(ctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("jsjournal: the last claim of SET %d: %w", set, err)
	}
	return m.Sequence, nil
}

// Release hands set back, owned here at epoch with last its last message:
// no owner until another claims it. ErrClaimLost: someone appended since.
func (c *Claims) Release(ctx context.Context, set int, epoch, last uint64) error {
	_, err := c.s.AppendRelease(ctx, set, epoch, last)
	if errors.Is(err, journal.ErrFenced) {
		return fmt.Errorf("%w: %v", ErrClaimLost, err)
	}
	return err
}

// Close stops the watch.
func (c *Claims) Close() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}
