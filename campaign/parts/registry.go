package parts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hongbao-io/hongbao/campaign"
)

// Registry is a cluster's campaigns where SETs fail over (-journal
// jetstream): every start and cancel, signed, on the journal's stream
// (<prefix>.j.campaigns.<node>.op, the subject naming the gateway that
// wrote it), which every gateway reads whole before it runs a SET and
// follows after. A gateway down when a campaign is created, or cut off
// when it is cancelled, learns it there; whichever gateway runs a SET then
// gives the SET its share, or ends it. Ids are the registry's own, one past
// the last start, appended only after the last op its writer read, so no
// two gateways give one id and none needs a node number for it.
type Registry struct {
	js     jetstream.JetStream
	stream string
	prefix string
	node   int
	runner *campaign.Runner
	limits campaign.Limits
	key    []byte
	log    *slog.Logger
	refuse func(node int, why string)

	mu      sync.Mutex
	lastSeq uint64 // the last op read
	lastID  int    // the last start's id
	seen    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	Conn   *nats.Conn // the gateway's journal connection
	Stream string     // the journal's stream
	Prefix string     // its subjects' prefix
	Node   int
	Runner *campaign.Runner
	Limits campaign.Limits
	Key    []byte // the admin token's key, which signs the ops; nil without one
	Log    *slog.Logger
	// Refused is told of an op refused: not signed with the admin token,
	// or naming another gateway than its subject's.
	Refused func(node int, why string)
}

func (g *Registry) subject(node int) string {
	return g.prefix + ".j.campaigns." + strconv.Itoa(node) + ".op"
}

func (g *Registry) filter() string { return g.prefix + ".j.campaigns.>" }

// OpenRegistry reads every campaign op there is into cfg.Runner, then
// follows the ops until Close.
func OpenRegistry(ctx context.Context, cfg RegistryConfig) (*Registry, error) {
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	g := &Registry{js: js, stream: cfg.Stream, prefix: cfg.Prefix, node: cfg.Node, runner: cfg.Runner, limits: cfg.Limits,
		key: cfg.Key, log: cfg.Log, refuse: cfg.Refused, seen: make(chan struct{}), done: make(chan struct{})}
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("campaigns: %w", err)
	}
	var upTo uint64
	if m, err := st.GetLastMsgForSubject(ctx, g.filter()); err == nil {
		upTo = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("campaigns: the last op: %w", err)
	}
	cons, err := js.OrderedConsumer(ctx, cfg.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{g.filter()},
		InactiveThreshold: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("campaigns: following the ops: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("campaigns: following the ops: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() {
		defer close(g.done)
		go func() { <-wctx.Done(); it.Stop() }()
		for {
			m, err := it.Next()
			if err != nil {
				if wctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					g.log.Error("campaigns: following the ops stopped: campaigns created or cancelled from now are not seen here", "err", err)
				}
				return
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			g.apply(m.Subject(), m.Data(), md.Sequence.Stream)
		}
	}()
	if err := g.wait(ctx, upTo); err != nil {
		g.Close()
		return nil, fmt.Errorf("campaigns: reading the ops: %w", err)
	}
	return g, nil
}

// wait returns once the op at seq (or a later one) is read.
func (g *Registry) wait(ctx context.Context, seq uint64) error {
	for {
		g.mu.Lock()
		read, seen := g.lastSeq, g.seen
		g.mu.Unlock()
		if read >= seq {
			return nil
		}
		select {
		case <-seen:
		case <-g.done:
			return errors.New("the registry was closed")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// apply carries out the op at seq, written on subject.
func (g *Registry) apply(subject string, data []byte, seq uint64) {
	defer func() {
		g.mu.Lock()
		g.lastSeq = max(g.lastSeq, seq)
		close(g.seen)
		g.seen = make(chan struct{})
		g.mu.Unlock()
	}()
	node, op, why := g.open(subject, data)
	if why != "" {
		g.log.Error("campaigns: an op refused", "seq", seq, "subject", subject, "why", why)
		if g.refuse != nil {
			g.refuse(node, why)
		}
		return
	}
	switch op.Op {
	case "start":
		g.mu.Lock()
		g.lastID = max(g.lastID, op.ID)
		g.mu.Unlock()
		if g.runner.Has(op.ID) {
			return // read before, or its start a restart recovered
		}
		if _, err := g.runner.StartAs(op.ID, op.Params); err != nil {
			g.log.Error("campaigns: a campaign was not started here: the shares of this gateway's SETs are not dealt", "id", op.ID, "from", op.From, "err", err)
		}
	case "cancel":
		g.runner.Cancel(op.ID)
	}
}

// open decodes the op written on subject, or says why it is refused.
func (g *Registry) open(subject string, data []byte) (int, campaignOp, string) {
	tok := strings.Split(strings.TrimPrefix(subject, g.prefix+".j.campaigns."), ".")
	node, err := strconv.Atoi(tok[0])
	if len(tok) != 2 || err != nil {
		return -1, campaignOp{}, "not an op's subject"
	}
	op, why := openSigned(g.key, data)
	if why == "" && (op.From != node || op.ID <= 0) {
		why = "an op naming another gateway than its subject's, or no campaign"
	}
	return node, op, why
}

// append writes op after the last op read; ok false: another gateway
// appended first.
func (g *Registry) append(ctx context.Context, op campaignOp, after uint64) (bool, error) {
	m := nats.NewMsg(g.subject(g.node))
	m.Data = sign(g.key, op)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(after, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, g.filter())
	ack, err := g.js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, g.wait(ctx, ack.Sequence)
}

// Start creates campaign p: durable in the registry, then started here;
// every other gateway starts it as it reads it.
func (g *Registry) Start(p campaign.Params) (campaign.Status, error) {
	if err := p.Validate(g.limits); err != nil {
		return campaign.Status{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.runner.Room(); err != nil {
		return campaign.Status{}, err
	}
	for {
		g.mu.Lock()
		after, id := g.lastSeq, g.lastID+1
		g.mu.Unlock()
		ok, err := g.append(ctx, campaignOp{Op: "start", From: g.node, ID: id, Params: p}, after)
		if err != nil {
			return campaign.Status{}, fmt.Errorf("%w: %v", campaign.ErrNotDurable, err)
		}
		if ok { // read, so started here
			if st, ok := g.runner.Status(id); ok {
				return st, nil
			}
			return campaign.Status{}, fmt.Errorf("campaign %d was created for the cluster but not started here: see this gateway's log", id)
		}
		if err := g.wait(ctx, after+1); err != nil { // read what came first, then try again
			return campaign.Status{}, fmt.Errorf("%w: %v", campaign.ErrNotDurable, err)
		}
	}
}

// Cancel cancels campaign id here and writes the cancel to the registry,
// whatever the answer here: every gateway cancels it as it reads it.
func (g *Registry) Cancel(id int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.js.Publish(ctx, g.subject(g.node), sign(g.key, campaignOp{Op: "cancel", From: g.node, ID: id})); err != nil {
		g.log.Error("campaigns: a cancel was not written: the other gateways go on dealing it; cancel it again", "id", id, "err", err)
	}
}

// Close stops following the ops.
func (g *Registry) Close() {
	g.cancel()
	<-g.done
}
