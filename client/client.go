// Package client is the Go client of hongbao's wire protocol
// (docs/PROTOCOL.md): one user's connection to a server or a cluster of
// gateways, for applications. (The load client keeps its own epoll engine,
// built for a million users; both speak through package proto.)
//
// A Client is safe for concurrent use: requests are pipelined on the one
// connection, each matched to its answer by stamp, so many may be in
// flight at once. Pushes (ENVELOPE, CHAT_DELIVER) arrive on Pushes. Login
// follows LOGIN_ACK 3 to the user's gateway; once logged in, a Client whose
// connection is lost (the gateway died, shut down, or moved the user's SET:
// ERROR 8, ERROR 9) dials the addresses again, with backoff and jitter, and
// logs in again, as a cluster whose SETs fail over expects of its clients
// (MaxReconnects bounds the attempts; OnDisconnect and OnLogin tell). A
// gateway that failed — refused the connect, or took it and did not answer
// a LOGIN or a PING — is asked again only once every other has failed
// since, and redirects to it are not followed for twice DialTimeout (at
// least a second): while a paused or dead gateway's SETs fail over, the
// others name it for a moment still.
// Any other ERROR is final: the server meant this connection to end (a
// newer LOGIN of the same user replaced it, ERROR 5) or found it broken,
// and logging in again would only repeat it — two Clients of one user
// would replace each other for ever. The Client then stops, and every
// request fails with that *ServerError.
//
// Shake, Open and Send carry a request id of their own (docs/PROTOCOL.md,
// Request ids). One in flight when its connection ends is sent again with
// the same id on the next login's connection, as often as it takes: the
// server answers the retry as it answered the first, so it is carried out
// once, and its caller sees only the answer ("overloaded" to a retry, which
// says nothing of the first, is asked again after a wait). It fails with ErrConnLost only
// when the Client cannot log in again (it stopped, or NoReconnect), and
// with its context's error when that ends first; then it may or may not
// have been carried out: a call made with WithRequestID and the same id
// learns which. A Chat or Ping in flight when its connection ends is
// not sent again: its error is ErrConnLost for errors.Is whatever ended the
// connection, and, when an ERROR frame did, that *ServerError too
// (errors.Is(err, ErrMoved) holds as well). A request whose connection
// ended before it was written waits for the next login and is sent there.
//
// Every refusal is an error with a kind to test with errors.Is: a status
// (*StatusError: ErrEmpty, ErrOverloaded…) or an ERROR frame
// (*ServerError: ErrMoved, ErrReplaced…).
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// Option configures Dial.
type Option func(*options)

type options struct {
	dialTimeout      time.Duration
	logger           *slog.Logger
	reconnect        bool
	minWait, maxWait time.Duration
	maxRedirects     int
	pushBuffer       int
	tokens           func(user uint32) []byte
	pingEvery        time.Duration
	maxReconnects    int // attempts in a row; < 0: no bound
	onLogin          func(addr string)
	onDisconnect     func(addr string, err error)
	onStop           func(err error)
	dialer           func(ctx context.Context, network, addr string) (net.Conn, error)
	tls              *tls.Config
	writeTimeout     time.Duration
}

// WithDialer makes the Client open its connections with dial (a proxy, a
// bound source address, a test's pipe) instead of a net.Dialer of
// DialTimeout.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = dial }
}

// WithTLS speaks TLS over each connection, with cfg (its ServerName, if
// empty, the host of the address dialled): through a proxy that ends TLS
// before the gateways.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WriteTimeout bounds the write of a request whose context has no deadline
// (default 10 s; a context's deadline bounds it otherwise): a connection
// whose peer stopped reading, its send buffer full, ends then
// (ErrConnLost) and the Client logs in again, instead of holding its
// callers.
func WriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// DialTimeout bounds each TCP connect, and the LOGIN_ACK after it
// (default 5 s).
func DialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// Logger receives the Client's reconnects and dropped pushes, the first
// dropped and then a line every 10 s at most (default: none).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// NoReconnect makes a lost connection final: every request fails from then on.
func NoReconnect() Option { return func(o *options) { o.reconnect = false } }

// MaxReconnects bounds the attempts in a row to log in again after a lost
// connection, each a dial of the next address and the redirects it meets;
// past them the Client stops, as with NoReconnect. Default: no bound — a
// cluster's SETs come back once a gateway takes them over, whenever that
// is (negative: no bound).
func MaxReconnects(n int) Option { return func(o *options) { o.maxReconnects = n } }

// ReconnectWait sets the backoff between attempts to reach a gateway: it
// starts at lo, doubles up to hi, and each wait is drawn from its upper
// half, so that a SET's users do not all come back at once (default 50 ms
// to 2 s).
func ReconnectWait(lo, hi time.Duration) Option {
	return func(o *options) { o.minWait, o.maxWait = lo, hi }
}

// MaxRedirects bounds the LOGIN_ACK 3 followed in a row (default 4).
func MaxRedirects(n int) Option { return func(o *options) { o.maxRedirects = n } }

// PushBuffer sets how many pushes wait on Pushes (default 1024); past that,
// pushes are dropped and counted (Stats), as the server's own buffers are
// bounded.
func PushBuffer(n int) Option { return func(o *options) { o.pushBuffer = n } }

// Tokens mints the LOGIN token of a user at every login, reconnects
// included, in place of the one given to Login: for tokens that expire.
func Tokens(f func(user uint32) []byte) Option { return func(o *options) { o.tokens = f } }

// PingInterval sends a PING every d on the logged-in connection; one still
// unanswered at the next makes the connection stale — its gateway paused,
// or cut off without a close — and the Client drops it and logs in again
// (default 5 s; 0: never).
func PingInterval(d time.Duration) Option { return func(o *options) { o.pingEvery = d } }

// OnLogin runs after every login, the first and those after a lost
// connection (nats.go's ReconnectHandler), with the gateway's address.
//
// The On… callbacks run one at a time, in the order of what they report,
// on a goroutine of the Client's own: they may call the Client, and a slow
// one holds up no connection, only the callbacks after it. One may run
// after Close returns.
func OnLogin(f func(addr string)) Option { return func(o *options) { o.onLogin = f } }

// OnDisconnect runs when the logged-in connection ends other than by
// Close, with the gateway's address and why: ErrConnLost, or the
// *ServerError of the ERROR frame that ended it (nats.go's
// DisconnectErrHandler). The Client logs in again unless the error is
// final; then OnStop follows.
func OnDisconnect(f func(addr string, err error)) Option {
	return func(o *options) { o.onDisconnect = f }
}

// OnStop runs once if the Client stops for good other than by Close: a
// final ERROR (see the package doc), MaxReconnects used up, NoReconnect,
// or a login again refused (a bad token); err is what every request gets
// from then on. Close the Client to free it.
func OnStop(f func(err error)) Option { return func(o *options) { o.onStop = f } }

// Push is a frame the server sends unasked.
type Push struct {
	Type proto.Type // proto.Envelope or proto.ChatDeliver
	// ENVELOPE: a group envelope for this user, to Open.
	Envelope uint64
	Sender   uint32 // 0 for a send campaign
	Total    uint32
	Shares   uint16
	// CHAT_DELIVER: a chat from From.
	From uint32
	Text []byte
	// Stamp: ENVELOPE's creation time (unix ns), CHAT_DELIVER the CHAT's.
	Stamp uint64
}

// Stats counts what a Client went through.
type Stats struct {
	Reconnects    uint64 // logins after a lost connection
	Resent        uint64 // SHAKEs, OPENs and SENDs sent again with their request id: after their connection ended, or refused at the door when sent again
	Redirects     uint64 // LOGIN_ACK 3 followed
	NoOwner       uint64 // LOGIN_ACK 3 with no address: the user's SET had no gateway
	DialErrors    uint64 // connects that failed
	Stale         uint64 // connections dropped for a PING unanswered
	Shunned       uint64 // redirects not followed: they named a gateway that failed lately
	DroppedPushes uint64 // pushes dropped because Pushes was full
}

// Client is one user's connection. Create it with Dial, then Login.
type Client struct {
	o     options
	addrs []string
	log   *slog.Logger

	mu       sync.Mutex
	sess     *session      // the logged-in connection; nil while there is none
	ready    chan struct{} // closed once sess is set: replaced when it is lost
	first    *session      // Dial's connection, until Login uses it
	user     uint32
	token    []byte
	loggedIn bool
	relogin  bool // the session was lost: the next one installed is a reconnect
	next     int  // the address to try next
	// failed: when each gateway last failed (a connect refused, a LOGIN or
	// PING unanswered), until it answers a LOGIN again: a dead or paused
	// gateway, asked or redirected to, would cost a timeout each time.
	failed map[string]time.Time
	closed bool
	err    error // why the Client stopped for good

	closing chan struct{}
	wg      sync.WaitGroup // readers and the reconnect
	stamp   atomic.Uint64
	pushes  chan Push

	// The On… callbacks to run, queued under mu as the changes they report
	// happen, so that they run in that order (dispatch).
	callbacks []func()
	wake      chan struct{} // a callback queued: capacity 1

	reconnects, redirects, noOwner, dialErrors, stale, shuns, dropped, resent atomic.Uint64
	droppedLogged                                                             atomic.Int64 // when a dropped push was last logged (unix ns)
}

// Dial connects to the first of addrs that answers (host:port each): every
// gateway of a cluster serves every user, by redirect. The Client is not
// logged in yet.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("hongbao: Dial needs at least one address")
	}
	o := options{dialTimeout: 5 * time.Second, reconnect: true, minWait: 50 * time.Millisecond, maxWait: 2 * time.Second,
		maxRedirects: 4, pushBuffer: 1024, pingEvery: 5 * time.Second, maxReconnects: -1, writeTimeout: 10 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.minWait <= 0 || o.maxWait < o.minWait {
		return nil, fmt.Errorf("hongbao: ReconnectWait(%v, %v): want 0 < lo ≤ hi", o.minWait, o.maxWait)
	}
	if o.writeTimeout <= 0 {
		return nil, fmt.Errorf("hongbao: WriteTimeout(%v): want a positive duration", o.writeTimeout)
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{o: o, addrs: append([]string(nil), addrs...), log: log, ready: make(chan struct{}),
		closing: make(chan struct{}), pushes: make(chan Push, max(1, o.pushBuffer)), wake: make(chan struct{}, 1)}
	if o.onLogin != nil || o.onDisconnect != nil || o.onStop != nil {
		go c.dispatch() // not in wg: a callback may call Close, which waits for wg
	}
	var errs []error
	for i, addr := range c.addrs {
		s, err := c.dial(ctx, addr)
		if err == nil {
			c.first, c.next = s, (i+1)%len(c.addrs)
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// Pushes delivers the ENVELOPE and CHAT_DELIVER frames sent to the user. It
// is closed once the Client is.
func (c *Client) Pushes() <-chan Push { return c.pushes }

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	return Stats{Reconnects: c.reconnects.Load(), Resent: c.resent.Load(), Redirects: c.redirects.Load(), NoOwner: c.noOwner.Load(),
		DialErrors: c.dialErrors.Load(), Stale: c.stale.Load(), Shunned: c.shuns.Load(), DroppedPushes: c.dropped.Load()}
}

// Addr is the address of the gateway the Client is logged in at ("" while
// it has none).
func (c *Client) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return ""
	}
	return c.sess.addr
}

// Login logs user in with token (nil without an auth secret; see Tokens),
// following LOGIN_ACK 3 to the user's gateway, and retrying while the
// user's SET has no gateway (LOGIN_ACK 3 with no address) until ctx ends.
// A Client logs in once.
func (c *Client) Login(ctx context.Context, user uint32, token []byte) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.loggedIn || c.user != 0:
		c.mu.Unlock()
		return errors.New("hongbao: a Client logs in once")
	}
	c.user, c.token = user, token
	first := c.first
	c.first = nil
	c.mu.Unlock()
	err := c.establish(ctx, first, -1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.user = 0
		return err
	}
	c.loggedIn = true
	return nil
}

// Shake asks for a shake envelope: its id and amount (fen). ErrEmpty: the
// pool is empty; ErrOverloaded: try later.
func (c *Client) Shake(ctx context.Context) (env uint64, amount uint32, err error) {
	a, err := c.money(ctx, proto.ShakeResult, func(b []byte, stamp, id uint64) []byte { return proto.AppendShakeID(b, stamp, id) })
	return a.env, a.amount, err
}

// Open opens group envelope env: the user's share (fen). With
// ErrAlreadyOpened the amount is the share drawn earlier. A share once
// drawn is the user's: an Open that ends with ErrOverloaded (or its
// context's error) may have drawn it, and Open again (on this Client, or
// any) answers ErrAlreadyOpened with it, never a second share.
func (c *Client) Open(ctx context.Context, env uint64) (amount uint32, err error) {
	a, err := c.money(ctx, proto.OpenResult, func(b []byte, stamp, id uint64) []byte { return proto.AppendOpenID(b, stamp, env, id) })
	return a.amount, err
}

// Send creates a group envelope of total fen shared among recipients, and
// returns its id; each recipient is pushed an ENVELOPE.
func (c *Client) Send(ctx context.Context, total uint32, recipients []uint32) (env uint64, err error) {
	if len(recipients) > proto.MaxSendRecipients {
		return 0, fmt.Errorf("hongbao: SEND to %d recipients: a frame holds at most %d", len(recipients), proto.MaxSendRecipients)
	}
	a, err := c.money(ctx, proto.SendAck, func(b []byte, stamp, id uint64) []byte {
		return proto.AppendSendID(b, stamp, total, recipients, id)
	})
	return a.env, err
}

// Chat sends text to user to: nil once handed to the recipient's
// connection, ErrOffline when it is not connected.
func (c *Client) Chat(ctx context.Context, to uint32, text []byte) error {
	if len(text) > proto.MaxChatText {
		return fmt.Errorf("hongbao: a CHAT of %d bytes: at most %d", len(text), proto.MaxChatText)
	}
	_, err := c.do(ctx, proto.ChatAck, func(b []byte, stamp uint64) []byte { return proto.AppendChat(b, stamp, to, text) })
	return err
}

// Ping measures a round trip to the gateway.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	_, err := c.do(ctx, proto.Pong, func(b []byte, stamp uint64) []byte { return proto.AppendPing(b, stamp) })
	return time.Since(start), err
}

// Close closes the connection; requests in flight fail with ErrClosed, and
// Pushes is closed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	for _, s := range []*session{c.sess, c.first} {
		if s != nil {
			s.fail(ErrClosed)
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
	close(c.pushes)
	return nil
}

// do sends the request build makes on the logged-in connection (waiting
// for one while the Client reconnects) and returns its answer, of type
// want, as an error unless it is a success.
func (c *Client) do(ctx context.Context, want proto.Type, build func([]byte, uint64) []byte) (answer, error) {
	var a answer
	for {
		s, err := c.session(ctx)
		if err != nil {
			return answer{}, err
		}
		var sent bool
		if a, sent, err = s.roundTrip(ctx, build); !sent {
			// s ended before the request was written: nothing was done,
			// so it goes on the next login's connection, once s is no
			// longer the Client's (fail replaces it before done).
			select {
			case <-s.done:
				continue
			case <-ctx.Done():
				return answer{}, ctx.Err()
			}
		}
		if err != nil {
			return a, err
		}
		break
	}
	if a.t != want {
		return a, fmt.Errorf("hongbao: %s answered by %s", want, a.t)
	}
	return a, statusError(a.t, a.status)
}

// money sends a request that moves money with a request id of its own,
// and sends it again with the same id, on the next login's connection, each
// time its connection ends before the answer (see the package doc).
func (c *Client) money(ctx context.Context, want proto.Type, build func(b []byte, stamp, id uint64) []byte) (answer, error) {
	id, _ := ctx.Value(requestIDKey{}).(uint64)
	if id == 0 {
		id = NewRequestID()
	}
	resent := false
	for {
		a, err := c.do(ctx, want, func(b []byte, stamp uint64) []byte { return build(b, stamp, id) })
		switch {
		case resent && errors.Is(err, ErrOverloaded):
			// The retry was refused at the door; the first may still be held
			// for its journal (a stall): ask again, later, until an answer.
			t := time.NewTimer(c.o.minWait + rand.N(c.o.minWait))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return a, err
			}
		case !errors.Is(err, ErrConnLost) || !c.o.reconnect || ctx.Err() != nil:
			return a, err
		}
		resent = true
		c.resent.Add(1)
	}
}

// reqs numbers the request ids this process gives, for their low 32 bits.
var reqs atomic.Uint32

// NewRequestID returns a request id no other of this process's requests
// has (docs/PROTOCOL.md, Request ids): now's second, and a counter.
func NewRequestID() uint64 { return proto.NewRequestID(time.Now().Unix(), reqs.Add(1)) }

type requestIDKey struct{}

// WithRequestID returns a copy of ctx with which a Shake, Open or Send
// carries request id id (from NewRequestID) instead of one of its own. A
// caller whose call ended with its context's error, before the answer,
// calls again with the same id to learn what the first call did: the
// server answers it as it answered the first, or carries it out now if
// the first never reached it. Give each request its own id, and call again
// within the server's window (-request-window, 10 min by default).
func WithRequestID(ctx context.Context, id uint64) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// session returns the logged-in connection, waiting while there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, ready, err := c.sess, c.ready, c.err
		switch {
		case c.closed:
			err = ErrClosed
		case !c.loggedIn && s == nil:
			err = ErrNotLoggedInYet
		}
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if s != nil {
			return s, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// establish logs the user in, on first if it is not nil, else on a
// connection to the next address, following redirects and backing off
// between attempts until ctx ends or tries attempts failed (tries < 0: no
// bound). Bad tokens, invalid users and final ERRORs end it at once.
func (c *Client) establish(ctx context.Context, first *session, tries int) error {
	wait := c.o.minWait
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, first)
		first = nil
		if err == nil || final(err) {
			return err
		}
		if tries >= 0 && attempt >= tries {
			return fmt.Errorf("hongbao: %d attempts to log in failed, the last: %w", attempt, err)
		}
		if !c.backoff(ctx, &wait) {
			return errors.Join(ctx.Err(), err)
		}
	}
}

// attempt logs in once: on s if it is not nil, else on a connection to the
// next address, following up to MaxRedirects redirects.
func (c *Client) attempt(ctx context.Context, s *session) error {
	if s == nil {
		var err error
		if s, err = c.dial(ctx, c.nextAddr()); err != nil {
			return err
		}
	}
	for redirects := 0; ; redirects++ {
		to, err := c.login(ctx, s)
		if err == nil {
			return nil
		}
		s.fail(ErrConnLost)
		if to == "" || redirects >= c.o.maxRedirects || final(err) {
			if errors.Is(err, ErrNoOwner) {
				c.noOwner.Add(1)
			}
			return err
		}
		if c.isShunned(to) {
			// Sent to a gateway that just failed: most likely the one
			// whose SET is failing over. Ask again shortly, elsewhere.
			c.shuns.Add(1)
			return fmt.Errorf("%w: redirected to %s, which failed %v ago or less", ErrNoOwner, to, c.shunFor())
		}
		c.redirects.Add(1)
		if s, err = c.dial(ctx, to); err != nil {
			return err
		}
	}
}

// final reports whether err ends the Client rather than calling for
// another login: the user or its token refused, the Client closed, or an
// ERROR other than the server's shutdown (8) or a SET's move (9), which
// a login elsewhere or later mends.
func final(err error) bool {
	if errors.Is(err, ErrBadToken) || errors.Is(err, ErrInvalidUser) || errors.Is(err, ErrClosed) {
		return true
	}
	var se *ServerError
	return errors.As(err, &se) && se.Code != proto.ErrCodeShuttingDown && se.Code != proto.ErrCodeMoved
}

// login sends LOGIN on s and installs s once LOGIN_ACK 0 comes; with
// LOGIN_ACK 3 it returns the address to follow ("" when there is none).
func (c *Client) login(ctx context.Context, s *session) (redirect string, err error) {
	c.mu.Lock()
	user, token := c.user, c.token
	c.mu.Unlock()
	if c.o.tokens != nil {
		token = c.o.tokens(user)
	}
	// A gateway that accepts but does not answer (paused: the kernel
	// accepts for it) is given up like one that does not accept.
	lctx, cancel := context.WithTimeout(ctx, c.o.dialTimeout)
	defer cancel()
	a, _, err := s.roundTrip(lctx, func(b []byte, stamp uint64) []byte { return proto.AppendLogin(b, stamp, user, token) })
	if err != nil {
		if lctx.Err() != nil && ctx.Err() == nil {
			c.shun(s.addr) // it took the connection and said nothing
		}
		return "", err
	}
	c.answered(s.addr)
	if a.t != proto.LoginAck {
		return "", fmt.Errorf("hongbao: LOGIN answered by %s", a.t)
	}
	if err := statusError(a.t, a.status); err != nil {
		return a.addr, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", ErrClosed
	}
	// s may have died since its LOGIN_ACK, before it was the Client's, so
	// unseen by lost: it must not be installed. Once installed, lost sees
	// it (fail sets s.err before it calls lost).
	s.mu.Lock()
	dead := s.err
	s.mu.Unlock()
	if dead != nil {
		return "", dead
	}
	c.sess = s
	if c.relogin { // counted before any request sees the new session
		c.relogin = false
		c.reconnects.Add(1)
	}
	close(c.ready)
	if c.o.pingEvery > 0 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			s.keepalive(c.o.pingEvery)
		}()
	}
	if f := c.o.onLogin; f != nil {
		c.queue(func() { f(s.addr) })
	}
	return "", nil
}

// lost replaces s, which died with err, by a new login unless the Client
// is closed, does not reconnect, err is final, or s was not its session.
func (c *Client) lost(s *session, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != s || c.closed {
		return
	}
	c.sess, c.ready, c.relogin = nil, make(chan struct{}), true
	if f := c.o.onDisconnect; f != nil {
		c.queue(func() { f(s.addr, err) })
	}
	switch {
	case final(err):
		c.log.Error("hongbao: the server ended the connection for good: the client stops", "addr", s.addr, "err", err)
		c.stop(err)
		return
	case !c.o.reconnect:
		c.stop(fmt.Errorf("hongbao: the connection to %s was lost and NoReconnect is set: %w", s.addr, err))
		return
	}
	c.log.Info("hongbao: connection lost; logging in again", "addr", s.addr, "err", err)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-c.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := c.establish(ctx, nil, c.o.maxReconnects); err != nil {
			c.mu.Lock()
			if !c.closed {
				c.log.Error("hongbao: cannot log in again: the client stops", "err", err)
				c.stop(fmt.Errorf("hongbao: logging in again: %w", err))
			}
			c.mu.Unlock()
			return
		}
		c.log.Info("hongbao: logged in again", "addr", c.Addr())
	}()
}

// stop ends the Client for good with err, what every request gets from
// now on; under mu, with no session.
func (c *Client) stop(err error) {
	c.err = err
	close(c.ready)
	if f := c.o.onStop; f != nil {
		c.queue(func() { f(err) })
	}
}

// queue has f run by dispatch after the callbacks queued before it; under
// mu, so that callbacks run in the order of the changes they report.
func (c *Client) queue(f func()) {
	c.callbacks = append(c.callbacks, f)
	select {
	case c.wake <- struct{}{}:
	default: // dispatch is awake already
	}
}

// dispatch runs the queued callbacks in order until the Client is closed
// and none is left.
func (c *Client) dispatch() {
	for {
		c.mu.Lock()
		fs, closed := c.callbacks, c.closed
		c.callbacks = nil
		c.mu.Unlock()
		for _, f := range fs {
			f()
		}
		if len(fs) > 0 {
			continue
		}
		if closed {
			return
		}
		select {
		case <-c.wake:
		case <-c.closing:
		}
	}
}

// nextAddr is the address to dial next, in turn.
func (c *Client) nextAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	// In turn, the gateways that have not failed since they last answered;
	// if each has, the one that failed longest ago.
	oldest := -1
	for range c.addrs {
		i := c.next
		c.next = (c.next + 1) % len(c.addrs)
		at, ok := c.failed[c.addrs[i]]
		if !ok {
			return c.addrs[i]
		}
		if oldest < 0 || at.Before(c.failed[c.addrs[oldest]]) {
			oldest = i
		}
	}
	return c.addrs[oldest]
}

// shunFor is how long a gateway that failed is passed over: twice the
// connect bound, at least a second — a failover's few seconds.
func (c *Client) shunFor() time.Duration { return max(2*c.o.dialTimeout, time.Second) }

// shun notes that addr failed now.
func (c *Client) shun(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = map[string]time.Time{}
	}
	if len(c.failed) >= 64 { // redirects name gateways not in addrs: keep it small
		for a := range c.failed {
			delete(c.failed, a)
			break
		}
	}
	c.failed[addr] = time.Now()
}

// answered notes that addr answered a LOGIN: it serves again.
func (c *Client) answered(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failed, addr)
}

// isShunned reports whether addr failed within shunFor and has not
// answered since.
func (c *Client) isShunned(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.failed[addr]
	return ok && time.Since(at) < c.shunFor()
}

// backoff sleeps a jittered *wait and doubles it up to the maximum; false
// if ctx ended first.
func (c *Client) backoff(ctx context.Context, wait *time.Duration) bool {
	d := *wait/2 + rand.N(*wait/2+1)
	*wait = min(2**wait, c.o.maxWait)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// handshake runs TLS's handshake on nc, within DialTimeout.
func (c *Client) handshake(ctx context.Context, nc net.Conn, addr string) (net.Conn, error) {
	cfg := c.o.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(nc, cfg)
	hctx, cancel := context.WithTimeout(ctx, c.o.dialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}

// dial opens a connection to addr and starts its reader.
func (c *Client) dial(ctx context.Context, addr string) (*session, error) {
	dial := c.o.dialer
	if dial == nil {
		dial = (&net.Dialer{Timeout: c.o.dialTimeout}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err == nil && c.o.tls != nil {
		nc, err = c.handshake(ctx, nc, addr)
	}
	if err != nil {
		c.dialErrors.Add(1)
		if ctx.Err() == nil {
			c.shun(addr)
		}
		return nil, fmt.Errorf("hongbao: %w", err)
	}
	s := &session{c: c, nc: nc, addr: addr, pending: map[uint64]chan answer{}, done: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		s.read()
	}()
	return s, nil
}

// answer is a decoded answer.
type answer struct {
	t      proto.Type
	status uint8
	env    uint64
	amount uint32
	addr   string // LOGIN_ACK 3's
}

// session is one TCP connection and its requests in flight.
type session struct {
	c    *Client
	nc   net.Conn
	addr string

	wmu sync.Mutex // one frame written at a time
	buf []byte     // the frame being written, under wmu

	mu      sync.Mutex
	pending map[uint64]chan answer // by stamp
	err     error                  // why it died
	done    chan struct{}          // closed once it died
}

// roundTrip writes a request and waits for its answer. sent is false when
// s had ended before the request was written: nothing was done. A request
// written whose answer s ended before fails with ErrConnLost (inFlight).
func (s *session) roundTrip(ctx context.Context, build func([]byte, uint64) []byte) (a answer, sent bool, err error) {
	stamp := s.c.stamp.Add(1)
	ch := make(chan answer, 1)
	s.mu.Lock()
	if err = s.err; err != nil {
		s.mu.Unlock()
		return answer{}, false, err
	}
	s.pending[stamp] = ch
	s.mu.Unlock()
	s.wmu.Lock()
	if err = ctx.Err(); err != nil { // its turn came too late: not written
		s.wmu.Unlock()
		s.forget(stamp)
		return answer{}, false, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(s.c.o.writeTimeout)
	}
	s.nc.SetWriteDeadline(dl)
	s.buf = build(s.buf[:0], stamp)
	_, err = s.nc.Write(s.buf)
	s.wmu.Unlock()
	if err != nil {
		s.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
	}
	select {
	case a := <-ch:
		return a, true, nil
	case <-ctx.Done():
		s.forget(stamp)
		return answer{}, true, ctx.Err()
	case <-s.done:
		select {
		case a := <-ch: // answered before it died
			return a, true, nil
		default:
		}
		return answer{}, true, inFlight(s.err)
	}
}

// inFlight is the error of a request written on a connection that ended,
// with err, before its answer: ErrConnLost, whatever ended it, so that one
// test tells a caller that the request may or may not have been carried
// out; an ERROR's *ServerError stays in it for errors.Is and errors.As.
// Close's requests get ErrClosed: the caller ended them.
func inFlight(err error) error {
	if errors.Is(err, ErrConnLost) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrConnLost, err)
}

// keepalive PINGs every d until the session ends, and fails it when a PING
// is still unanswered at the next.
func (s *session) keepalive(d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	var out atomic.Bool // a PING unanswered
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if out.Load() {
			s.c.stale.Add(1)
			s.c.shun(s.addr)
			s.fail(fmt.Errorf("%w: no PONG within %v: the gateway paused or is cut off", ErrConnLost, d))
			return
		}
		out.Store(true)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*d)
			defer cancel()
			if _, _, err := s.roundTrip(ctx, func(b []byte, stamp uint64) []byte { return proto.AppendPing(b, stamp) }); err == nil {
				out.Store(false)
			}
		}()
	}
}

func (s *session) forget(stamp uint64) {
	s.mu.Lock()
	delete(s.pending, stamp)
	s.mu.Unlock()
}

// fail ends the session with err (the first error wins) and, if it was the
// Client's, has it log in again.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	s.mu.Unlock()
	if !errors.Is(err, ErrClosed) {
		s.c.lost(s, err) // before its requests hear of it: their next one waits for the new login
	}
	close(s.done)
	s.nc.Close()
}

// read decodes frames until the connection ends: answers to their
// requests, pushes to Pushes, an ERROR ends the session.
func (s *session) read() {
	buf := make([]byte, 0, 64<<10)
	for {
		if len(buf) == cap(buf) {
			s.fail(fmt.Errorf("%w: a frame larger than the buffer", ErrConnLost))
			return
		}
		n, err := s.nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		off := 0
		for {
			f, size, perr := proto.NextResponse(buf[off:])
			if perr != nil {
				s.fail(fmt.Errorf("%w: %v", ErrConnLost, perr))
				return
			}
			if size == 0 {
				break
			}
			off += size
			if f.Type == proto.Error {
				s.fail(serverError(f.ErrorCode()))
				return
			}
			s.take(f)
		}
		buf = buf[:copy(buf, buf[off:])]
		if err != nil {
			s.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
			return
		}
	}
}

// droppedLogEvery spaces the log lines of dropped pushes: a reader that
// fell behind drops pushes by the thousand, and one line says as much.
const droppedLogEvery = 10 * time.Second

// droppedPush counts a push dropped for a full Pushes, and logs the first
// and then one line every droppedLogEvery at most, with the count so far.
func (c *Client) droppedPush() {
	n := c.dropped.Add(1)
	now := time.Now().UnixNano()
	last := c.droppedLogged.Load()
	if n > 1 && now-last < int64(droppedLogEvery) || !c.droppedLogged.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn("hongbao: pushes dropped: Pushes is full (PushBuffer); counted in Stats", "dropped", n)
}

// take hands one frame to its request, or to Pushes.
func (s *session) take(f proto.Frame) {
	var a answer
	switch a.t = f.Type; f.Type {
	case proto.Envelope, proto.ChatDeliver:
		p := Push{Type: f.Type, Stamp: f.Stamp}
		if f.Type == proto.Envelope {
			p.Envelope, p.Sender, p.Total, p.Shares = f.Envelope()
		} else {
			from, text := f.ChatDeliver()
			p.From, p.Text = from, append([]byte(nil), text...)
		}
		select {
		case s.c.pushes <- p:
		default:
			s.c.droppedPush()
		}
		return
	case proto.LoginAck:
		a.status, _ = f.LoginAck()
		if a.status == proto.LoginWrongGateway {
			a.addr = string(f.LoginRedirect())
		}
	case proto.ShakeResult:
		a.status, a.env, a.amount = f.ShakeResult()
	case proto.OpenResult:
		a.status, a.env, a.amount = f.OpenResult()
	case proto.SendAck:
		a.status, a.env = f.SendAck()
	case proto.ChatAck:
		a.status, _ = f.ChatAck()
	}
	s.mu.Lock()
	ch := s.pending[f.Stamp]
	delete(s.pending, f.Stamp)
	s.mu.Unlock()
	if ch != nil {
		ch <- a
	}
}
