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
// logs in again, as a cluster whose SETs fail over expects of its clients.
// A request in flight when the connection goes is not sent again: it fails
// with ErrConnLost, and the caller decides, since it may have been carried
// out.
//
// Every refusal is an error with a kind to test with errors.Is: a status
// (*StatusError: ErrEmpty, ErrOverloaded…) or an ERROR frame
// (*ServerError: ErrMoved, ErrReplaced…).
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"hongbao/proto"
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
	onLogin          func(addr string)
}

// DialTimeout bounds each TCP connect (default 5 s).
func DialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// Logger receives the Client's reconnects and dropped pushes (default: none).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// NoReconnect makes a lost connection final: every request fails from then on.
func NoReconnect() Option { return func(o *options) { o.reconnect = false } }

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
// connection, with the gateway's address; on the Client's goroutine: it
// must not block.
func OnLogin(f func(addr string)) Option { return func(o *options) { o.onLogin = f } }

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
	Redirects     uint64 // LOGIN_ACK 3 followed
	NoOwner       uint64 // LOGIN_ACK 3 with no address: the user's SET had no gateway
	DialErrors    uint64 // connects that failed
	Stale         uint64 // connections dropped for a PING unanswered
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
	next     int // the address to try next
	closed   bool
	err      error // why the Client stopped for good

	closing chan struct{}
	wg      sync.WaitGroup // readers and the reconnect
	stamp   atomic.Uint64
	pushes  chan Push

	reconnects, redirects, noOwner, dialErrors, stale, dropped atomic.Uint64
}

// Dial connects to the first of addrs that answers (host:port each): every
// gateway of a cluster serves every user, by redirect. The Client is not
// logged in yet.
func Dial(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("hongbao: Dial needs at least one address")
	}
	o := options{dialTimeout: 5 * time.Second, reconnect: true, minWait: 50 * time.Millisecond, maxWait: 2 * time.Second,
		maxRedirects: 4, pushBuffer: 1024, pingEvery: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.minWait <= 0 || o.maxWait < o.minWait {
		return nil, fmt.Errorf("hongbao: ReconnectWait(%v, %v): want 0 < lo ≤ hi", o.minWait, o.maxWait)
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{o: o, addrs: append([]string(nil), addrs...), log: log, ready: make(chan struct{}),
		closing: make(chan struct{}), pushes: make(chan Push, max(1, o.pushBuffer))}
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
	return Stats{Reconnects: c.reconnects.Load(), Redirects: c.redirects.Load(), NoOwner: c.noOwner.Load(),
		DialErrors: c.dialErrors.Load(), Stale: c.stale.Load(), DroppedPushes: c.dropped.Load()}
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
	err := c.establish(ctx, first)
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
	a, err := c.do(ctx, proto.ShakeResult, func(b []byte, stamp uint64) []byte { return proto.AppendShake(b, stamp) })
	return a.env, a.amount, err
}

// Open opens group envelope env: the user's share (fen). With
// ErrAlreadyOpened the amount is the share got earlier.
func (c *Client) Open(ctx context.Context, env uint64) (amount uint32, err error) {
	a, err := c.do(ctx, proto.OpenResult, func(b []byte, stamp uint64) []byte { return proto.AppendOpen(b, stamp, env) })
	return a.amount, err
}

// Send creates a group envelope of total fen shared among recipients, and
// returns its id; each recipient is pushed an ENVELOPE.
func (c *Client) Send(ctx context.Context, total uint32, recipients []uint32) (env uint64, err error) {
	if len(recipients) > proto.MaxSendRecipients {
		return 0, fmt.Errorf("hongbao: SEND to %d recipients: a frame holds at most %d", len(recipients), proto.MaxSendRecipients)
	}
	a, err := c.do(ctx, proto.SendAck, func(b []byte, stamp uint64) []byte { return proto.AppendSend(b, stamp, total, recipients) })
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
	s, err := c.session(ctx)
	if err != nil {
		return answer{}, err
	}
	a, err := s.roundTrip(ctx, build)
	if err != nil {
		return a, err
	}
	if a.t != want {
		return a, fmt.Errorf("hongbao: %s answered by %s", want, a.t)
	}
	return a, statusError(a.t, a.status)
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
// between failures until ctx ends. Bad tokens and invalid users are final.
func (c *Client) establish(ctx context.Context, first *session) error {
	wait := c.o.minWait
	redirects := 0
	var last error
	for s := first; ; s = nil {
		if s == nil {
			addr := c.nextAddr()
			var err error
			if s, err = c.dial(ctx, addr); err != nil {
				last = err
				if !c.backoff(ctx, &wait) {
					return errors.Join(ctx.Err(), last)
				}
				continue
			}
		}
		for {
			to, err := c.login(ctx, s)
			if err == nil {
				return nil
			}
			s.fail(ErrConnLost)
			last = err
			if errors.Is(err, ErrBadToken) || errors.Is(err, ErrInvalidUser) || errors.Is(err, ErrClosed) {
				return err
			}
			if to == "" || redirects >= c.o.maxRedirects {
				if errors.Is(err, ErrNoOwner) {
					c.noOwner.Add(1)
				}
				break
			}
			redirects++
			c.redirects.Add(1)
			if s, err = c.dial(ctx, to); err != nil {
				last = err
				break
			}
		}
		redirects = 0
		if !c.backoff(ctx, &wait) {
			return errors.Join(ctx.Err(), last)
		}
	}
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
	a, err := s.roundTrip(ctx, func(b []byte, stamp uint64) []byte { return proto.AppendLogin(b, stamp, user, token) })
	if err != nil {
		return "", err
	}
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
	c.sess = s
	close(c.ready)
	if c.o.pingEvery > 0 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			s.keepalive(c.o.pingEvery)
		}()
	}
	if c.o.onLogin != nil {
		c.o.onLogin(s.addr)
	}
	return "", nil
}

// lost replaces s, which died with err, by a new login unless the Client
// is closed, does not reconnect, or s was not its session.
func (c *Client) lost(s *session, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != s || c.closed {
		return
	}
	c.sess, c.ready = nil, make(chan struct{})
	if !c.o.reconnect {
		c.err = fmt.Errorf("hongbao: the connection to %s was lost and NoReconnect is set: %w", s.addr, err)
		close(c.ready)
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
		if err := c.establish(ctx, nil); err != nil {
			c.mu.Lock()
			if !c.closed {
				c.err = fmt.Errorf("hongbao: logging in again: %w", err)
				c.log.Error("hongbao: cannot log in again: the client stops", "err", err)
				close(c.ready)
			}
			c.mu.Unlock()
			return
		}
		c.reconnects.Add(1)
		c.log.Info("hongbao: logged in again", "addr", c.Addr())
	}()
}

// nextAddr is the address to dial next, in turn.
func (c *Client) nextAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.addrs[c.next]
	c.next = (c.next + 1) % len(c.addrs)
	return a
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

// dial opens a connection to addr and starts its reader.
func (c *Client) dial(ctx context.Context, addr string) (*session, error) {
	d := net.Dialer{Timeout: c.o.dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.dialErrors.Add(1)
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

// roundTrip writes a request and waits for its answer.
func (s *session) roundTrip(ctx context.Context, build func([]byte, uint64) []byte) (answer, error) {
	stamp := s.c.stamp.Add(1)
	ch := make(chan answer, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return answer{}, err
	}
	s.pending[stamp] = ch
	s.mu.Unlock()
	s.wmu.Lock()
	s.buf = build(s.buf[:0], stamp)
	_, err := s.nc.Write(s.buf)
	s.wmu.Unlock()
	if err != nil {
		s.fail(fmt.Errorf("%w: %v", ErrConnLost, err))
	}
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		s.forget(stamp)
		return answer{}, ctx.Err()
	case <-s.done:
		select {
		case a := <-ch: // answered before it died
			return a, nil
		default:
		}
		return answer{}, s.err
	}
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
			s.fail(fmt.Errorf("%w: no PONG within %v: the gateway paused or is cut off", ErrConnLost, d))
			return
		}
		out.Store(true)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*d)
			defer cancel()
			if _, err := s.roundTrip(ctx, func(b []byte, stamp uint64) []byte { return proto.AppendPing(b, stamp) }); err == nil {
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
			if s.c.dropped.Add(1) == 1 {
				s.c.log.Warn("hongbao: a push dropped: Pushes is full (PushBuffer); counted in Stats")
			}
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
