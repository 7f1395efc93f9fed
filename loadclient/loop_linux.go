//go:build linux

package loadclient

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"hongbao/proto"
)

// Connection states.
const (
	stIdle       uint8 = iota // not connected: queued to connect, waiting out a backoff, or done
	stConnecting              // connect in progress
	stLogin                   // connected, LOGIN sent, LOGIN_ACK awaited
	stReady                   // logged in: sends on the schedule
	stDead                    // login refused: never reconnects
)

// uconn flags.
const (
	fDirty   uint8 = 1 << iota // on the loop's flush list this round
	fBlocked                   // the last write stopped short: wait for EPOLLOUT
)

// uconn is one user's connection, owned by its loop: 48 bytes (TestConnSize), so a loop of
// 10,000 users keeps 480 KB of them. Buffers are borrowed from the loop only while needed: in holds the
// start of a frame split across reads, out the output a write has not taken yet.
type uconn struct {
	fd       int32 // −1 when closed
	user     uint32
	state    uint8
	flags    uint8
	fails    uint8        // failed attempts since the last login: the backoff exponent
	inflight [nReq]uint16 // requests sent and not answered, by kind
	since    uint32       // loop ms: when the current wait began (connect, login, oldest answer)
	in, out  *[]byte      // nil when empty
}

func (c *uconn) waiting() bool {
	for _, n := range c.inflight {
		if n != 0 {
			return true
		}
	}
	return false
}

// Loop tuning, each with its reason.
const (
	readBufLen   = 64 << 10  // one read takes what a busy connection got in a round
	readsPerConn = 4         // reads per connection per round before the others get a turn
	sendBudget   = 4096      // scheduled sends per round, so a late loop still reads between bursts
	maxOut       = 256 << 10 // unwritten bytes a connection may hold; beyond, new requests are dropped
	keepBuf      = 16 << 10  // larger borrowed buffers go back to the GC, not the free list
	eventsLen    = 1024
	sweepEvery   = 250 * time.Millisecond // timeout checks: a quarter of the finest useful timeout
	backoffMin   = 100 * time.Millisecond
	backoffMax   = 5 * time.Second
	cmdIndex     = -1 // epoll data of the loop's eventfd
)

// Loop commands.
const (
	cmdRate = iota
	cmdEnd
	cmdStop
)

type command struct {
	kind uint8
	qps  uint32
	atNs int64
}

// loop is one event loop: it owns users first..first+len(conns)−1 of its process, their
// sockets, its own Schedule over them (the loops' schedules together are the process's share
// of the global one), and its counters and histograms. Only the loop's goroutine touches
// them; the engine talks to it through mu (commands in, published copies out) and the
// eventfd that wakes it.
type loop struct {
	id    int
	plan  *runPlan
	ep    int
	evfd  int
	first uint32
	conns []uconn
	runUs Range // the run's users, for recipients

	// Addresses: per-loop copies, because unix.Connect and Bind write into the Sockaddr.
	servers []unix.Sockaddr
	sources []unix.Sockaddr
	family  int
	srcNext int

	sched    *Schedule
	pendUser uint32 // the send Next returned and that is not due yet
	pendAt   int64
	havePend bool
	sendP    pacer
	chatP    pacer
	churnP   pacer
	rng      *rand.Rand
	rcpt     []uint32

	now, endNs int64
	base       int64 // origin of the ms clock in uconn.since
	nowMs      uint32

	rbuf   []byte
	free   []*[]byte
	dirty  []uint32
	again  []uint32
	events []unix.EpollEvent

	connQ      []uint32 // users to connect, FIFO from connHead
	connHead   int
	retries    retryHeap
	tokens     float64
	connRate   float64 // per ns
	lastRefill int64

	nextPublish, nextSweep int64
	up, connecting         int64

	c     counters
	hists [nHist]*LatencyHistogram
	live  *LatencyHistogram // SHAKE latencies since the last publish

	stopped bool

	mu      sync.Mutex // guards the fields below, shared with the engine
	cmds    []command
	pub     counters
	pubLive *LatencyHistogram
	err     error // a failure of the loop itself (epoll), reported by stop
}

// pacer spaces sends evenly: the next is due at next ns; step 0 is off.
type pacer struct{ next, step float64 }

func (p *pacer) due(now, end int64) bool {
	return p.step > 0 && p.next <= float64(now) && p.next < float64(end)
}

func (p *pacer) wake(end int64) int64 {
	if p.step == 0 || p.next >= float64(end) {
		return end
	}
	return int64(p.next)
}

func newLoop(id int, plan *runPlan, r Range) (*loop, error) {
	cfg := plan.cfg
	l := &loop{
		id: id, plan: plan, first: r.First, runUs: cfg.Users,
		conns:  make([]uconn, r.Len()),
		rng:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id))),
		endNs:  plan.endNs,
		base:   time.Now().UnixNano(),
		rbuf:   make([]byte, readBufLen),
		events: make([]unix.EpollEvent, eventsLen),
		connQ:  make([]uint32, r.Len()),
		live:   new(LatencyHistogram), pubLive: new(LatencyHistogram),
		ep: -1, evfd: -1,
	}
	for i := range l.hists {
		l.hists[i] = new(LatencyHistogram)
	}
	for i := range l.conns {
		l.conns[i] = uconn{fd: -1, user: r.First + uint32(i)}
		l.connQ[i] = uint32(i)
	}
	l.c.Users = int64(r.Len())
	var err error
	if l.sched, err = NewSchedule(cfg.TotalUsers, r.First, r.Last); err != nil {
		return nil, err
	}
	for _, ch := range plan.changes {
		if _, err := l.sched.SetRate(ch.QPS, ch.AtNs); err != nil {
			return nil, err
		}
	}
	share := float64(r.Len()) / float64(cfg.Users.Len()) // this loop's part of the run's rates
	phase := l.rng.Float64()
	if cfg.SendRate > 0 {
		step := 1e9 / (cfg.SendRate * share)
		l.sendP = pacer{float64(plan.startNs) + phase*step, step}
	}
	if cfg.ChatRate > 0 {
		step := 1e9 / (cfg.ChatRate * share)
		l.chatP = pacer{float64(plan.startNs) + phase*step, step}
	}
	if cfg.ChurnRate > 0 {
		step := 1e9 / (cfg.ChurnRate * share)
		l.churnP = pacer{float64(plan.startNs) + phase*step, step}
	}
	localShare := float64(r.Len()) / float64(plan.local.Len())
	l.connRate = float64(cfg.ConnectRate) * localShare / 1e9
	l.tokens = 1
	for _, s := range plan.servers {
		l.servers = append(l.servers, sockaddr(s.Addr(), int(s.Port())))
	}
	l.family = unix.AF_INET
	if plan.servers[0].Addr().Is6() {
		l.family = unix.AF_INET6
	}
	for _, a := range plan.sources {
		l.sources = append(l.sources, sockaddr(a, 0))
	}
	l.srcNext = id
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, wrapSyscall("epoll_create1", err)
	}
	if l.evfd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(l.ep)
		return nil, wrapSyscall("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: cmdIndex}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.evfd, &ev); err != nil {
		unix.Close(l.ep)
		unix.Close(l.evfd)
		return nil, wrapSyscall("epoll_ctl", err)
	}
	return l, nil
}

// command queues cmd and wakes the loop. Safe for concurrent use.
func (l *loop) command(cmd command) {
	l.mu.Lock()
	l.cmds = append(l.cmds, cmd)
	l.mu.Unlock()
	var one = [8]byte{1} // an eventfd adds the 8-byte native-endian value; any non-zero wakes
	unix.Write(l.evfd, one[:])
}

func (l *loop) run(wg *sync.WaitGroup) {
	defer wg.Done()
	l.now = time.Now().UnixNano()
	l.lastRefill = l.now
	l.nextPublish = l.now + int64(publishEvery)
	l.nextSweep = l.now + int64(sweepEvery)
	for !l.stopped {
		n, err := epollWait(l.ep, l.events, l.wakeAt()-time.Now().UnixNano())
		if err != nil && err != unix.EINTR {
			l.mu.Lock()
			l.err = wrapSyscall("epoll_wait", err)
			l.mu.Unlock()
			break
		}
		l.now = time.Now().UnixNano()
		l.nowMs = uint32((l.now - l.base) / 1e6)
		for i := range max(n, 0) {
			l.event(&l.events[i])
		}
		l.readAgain()
		if l.now < l.endNs {
			l.sendDue()
			l.churnDue()
			l.connectDue()
		}
		l.flush()
		if l.now >= l.nextSweep {
			l.sweep()
			l.nextSweep = l.now + int64(sweepEvery)
		}
		if l.now >= l.nextPublish {
			l.publish()
			// On the wall clock's grid, which holds every whole second: the reporter,
			// ticking just after each second, then sees that second exactly.
			l.nextPublish = (l.now/int64(publishEvery) + 1) * int64(publishEvery)
		}
	}
	l.closeAll()
	l.publish()
	unix.Close(l.evfd)
	unix.Close(l.ep)
}

// wakeAt returns when the loop has work without an event: the next due send, connect,
// retry, publish or sweep; now when work is left over from the last round.
func (l *loop) wakeAt() int64 {
	if len(l.again) > 0 {
		return l.now
	}
	t := min(l.nextPublish, l.nextSweep)
	if l.now >= l.endNs {
		return t
	}
	t = min(t, l.endNs)
	if !l.havePend {
		if u, at, ok := l.sched.Next(); ok {
			l.pendUser, l.pendAt, l.havePend = u, at, true
		}
	}
	if l.havePend {
		t = min(t, l.pendAt)
	}
	t = min(t, l.sendP.wake(l.endNs), l.chatP.wake(l.endNs), l.churnP.wake(l.endNs))
	if l.connHead < len(l.connQ) {
		t = min(t, l.now+int64(max(0, (1-l.tokens)/l.connRate)))
	}
	if len(l.retries) > 0 {
		t = min(t, l.retries[0].at)
	}
	return t
}

func (l *loop) event(ev *unix.EpollEvent) {
	if ev.Fd == cmdIndex {
		l.commands()
		return
	}
	idx := uint32(ev.Fd)
	c := &l.conns[idx]
	if c.fd < 0 {
		return // closed earlier in this round
	}
	if c.state == stConnecting {
		if ev.Events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
			l.connected(c, idx)
		}
		return
	}
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.read(c, idx, ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0)
		if c.fd < 0 {
			return
		}
	}
	if ev.Events&unix.EPOLLOUT != 0 && c.flags&fBlocked != 0 {
		c.flags &^= fBlocked
		if c.out != nil {
			l.markDirty(c, idx)
		}
	}
}

func (l *loop) commands() {
	var buf [8]byte
	unix.Read(l.evfd, buf[:])
	l.mu.Lock()
	cmds := l.cmds
	l.cmds = nil
	l.mu.Unlock()
	for _, cmd := range cmds {
		switch cmd.kind {
		case cmdRate:
			b, err := l.sched.SetRate(cmd.qps, cmd.atNs)
			if err != nil {
				continue // the engine validated it
			}
			if l.havePend && l.pendAt >= b {
				l.havePend = false // void: Next returns it again at its new time
			}
			if now := time.Now().UnixNano(); b < now {
				// Told after the boundary: skip the new rate's sends already past rather
				// than burst them.
				l.havePend = false
				l.sched.SeekTo(now)
			}
		case cmdEnd:
			l.endNs = min(l.endNs, time.Now().UnixNano())
		case cmdStop:
			l.stopped = true
		}
	}
}

// sendDue sends every scheduled SHAKE, SEND and CHAT due by now, within the round's budget.
// A user who is not logged in skips its turn: the schedule never waits.
func (l *loop) sendDue() {
	for range sendBudget {
		if !l.havePend {
			u, at, ok := l.sched.Next()
			if !ok {
				break
			}
			l.pendUser, l.pendAt, l.havePend = u, at, true
		}
		if l.pendAt > l.now || l.pendAt >= l.endNs {
			break
		}
		l.havePend = false
		idx := l.pendUser - l.first
		c := &l.conns[idx]
		if c.state != stReady {
			l.c.Skipped++
			continue
		}
		if b := l.outBuf(c, idx); b != nil {
			*b = proto.AppendShake(*b, uint64(l.pendAt))
			l.sent(c, reqShake)
		}
	}
	for range sendBudget {
		c, idx, stamp, more := l.randomDue(&l.sendP)
		if !more {
			break
		}
		if c == nil {
			continue
		}
		l.pickRecipients(c.user)
		if b := l.outBuf(c, idx); b != nil {
			*b = proto.AppendSend(*b, stamp, l.plan.cfg.SendTotal, l.rcpt)
			l.sent(c, reqSend)
		}
	}
	for range sendBudget {
		c, idx, stamp, more := l.randomDue(&l.chatP)
		if !more {
			break
		}
		if c == nil {
			continue
		}
		to := l.randomUser(c.user)
		if b := l.outBuf(c, idx); b != nil {
			*b = proto.AppendChat(*b, stamp, to, l.plan.chatText)
			l.sent(c, reqChat)
		}
	}
}

// randomDue takes the next due send of pacer p for a random user of this
// loop. more is false when nothing is due; c is nil when the user picked is
// not logged in (the send is counted as skipped, never delayed).
func (l *loop) randomDue(p *pacer) (c *uconn, idx uint32, stamp uint64, more bool) {
	if !p.due(l.now, l.endNs) {
		return nil, 0, 0, false
	}
	stamp = uint64(p.next)
	p.next += p.step
	idx = uint32(l.rng.IntN(len(l.conns)))
	if c = &l.conns[idx]; c.state != stReady {
		l.c.Skipped++
		return nil, idx, stamp, true
	}
	return c, idx, stamp, true
}

// randomUser returns a user of the run other than not.
func (l *loop) randomUser(not uint32) uint32 {
	n := uint32(l.runUs.Len())
	u := l.runUs.First + l.rng.Uint32N(n-1)
	if u >= not {
		u++ // skip not: uniform over the other n−1
	}
	return u
}

// pickRecipients fills l.rcpt with distinct random users of the run other than sender.
func (l *loop) pickRecipients(sender uint32) {
	l.rcpt = l.rcpt[:0]
	for len(l.rcpt) < l.plan.cfg.SendRecipients {
		u := l.randomUser(sender)
		dup := false
		for _, r := range l.rcpt {
			dup = dup || r == u
		}
		if !dup {
			l.rcpt = append(l.rcpt, u)
		}
	}
}

// churnTries is how many random users a churn looks at for one that is logged in with
// nothing in flight; when none is, that churn is skipped.
const churnTries = 8

// churnDue closes the connections of the churns due by now and queues their users to
// connect again at once: a user who goes away and comes back, not an error. Only a logged-in
// connection with nothing in flight, nothing unwritten and no partial frame read goes, so no
// answer the server counted is ever unread and the reconciliation stays exact.
func (l *loop) churnDue() {
	// After a stall, the churns more than a second late are skipped: a user who would have
	// reconnected during it did not, rather than thousands reconnecting at once.
	if p := &l.churnP; p.step > 0 && float64(l.now)-p.next > 1e9 {
		p.next += math.Floor((float64(l.now)-p.next-1e9)/p.step+1) * p.step
	}
	for range sendBudget {
		if !l.churnP.due(l.now, l.endNs) {
			return
		}
		l.churnP.next += l.churnP.step
		for range churnTries {
			idx := uint32(l.rng.IntN(len(l.conns)))
			c := &l.conns[idx]
			if c.state != stReady || c.waiting() || c.out != nil || c.in != nil {
				continue
			}
			l.closeConn(c, &l.c.Lost) // nothing in flight: counts nothing
			l.setState(c, stIdle)
			c.fails = 0
			l.connQ = append(l.connQ, idx)
			l.c.Churned++
			break
		}
	}
}

// connectDue starts the connects the rate allows and moves due retries to the queue.
func (l *loop) connectDue() {
	for len(l.retries) > 0 && l.retries[0].at <= l.now {
		l.connQ = append(l.connQ, l.retries.pop().idx)
	}
	l.tokens = min(l.tokens+float64(l.now-l.lastRefill)*l.connRate, max(1, l.connRate*1e7)) // burst: 10 ms worth
	l.lastRefill = l.now
	for l.connHead < len(l.connQ) && l.tokens >= 1 {
		idx := l.connQ[l.connHead]
		l.connHead++
		l.tokens--
		l.dial(&l.conns[idx], idx)
	}
	if l.connHead == len(l.connQ) {
		l.connQ, l.connHead = l.connQ[:0], 0
	}
}

func (l *loop) dial(c *uconn, idx uint32) {
	if c.state != stIdle || c.fd >= 0 {
		return
	}
	fd, err := unix.Socket(l.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.c.Errors[errConnect]++
		l.retry(c, idx)
		return
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // we coalesce ourselves
	if len(l.sources) > 0 {
		src := l.sources[l.srcNext%len(l.sources)]
		l.srcNext++
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		// Pick the port at connect, from the whole 4-tuple, not at bind: without it every
		// bind(src:0) takes a port of its own and 28,000 connections exhaust them.
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		if err := unix.Bind(fd, src); err != nil {
			unix.Close(fd)
			l.c.Errors[errConnect]++
			l.retry(c, idx)
			return
		}
	}
	err = unix.Connect(fd, l.servers[(c.user-1)%uint32(len(l.servers))])
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		l.c.Errors[errConnect]++
		l.retry(c, idx)
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(idx)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		l.c.Errors[errConnect]++
		l.retry(c, idx)
		return
	}
	c.fd = int32(fd)
	c.since = l.nowMs
	l.setState(c, stConnecting)
}

// connected finishes a connect and sends LOGIN.
func (l *loop) connected(c *uconn, idx uint32) {
	soerr, err := unix.GetsockoptInt(int(c.fd), unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil || soerr != 0 {
		l.drop(c, idx, errConnect)
		return
	}
	l.c.Connects++
	l.setState(c, stLogin)
	c.since = l.nowMs
	var token []byte
	if l.plan.secret != nil {
		token = proto.MintToken(l.rbuf[:0:proto.TokenLen], l.plan.secret, c.user, time.Now().Add(24*time.Hour).Unix())
	}
	b := l.outBuf(c, idx)
	*b = proto.AppendLogin(*b, uint64(l.now), c.user, token)
	l.sent(c, reqLogin)
}

func (l *loop) setState(c *uconn, s uint8) {
	switch c.state {
	case stReady:
		l.up--
	case stConnecting, stLogin:
		l.connecting--
	}
	switch s {
	case stReady:
		l.up++
	case stConnecting, stLogin:
		l.connecting++
	}
	c.state = s
}

// read reads what c has, up to its budget, and handles every whole frame. With edge-triggered
// epoll a read that fills less than the buffer has emptied the socket, unless the peer closed
// (hup), when reading on finds the end.
func (l *loop) read(c *uconn, idx uint32, hup bool) {
	for range readsPerConn {
		off := 0
		if c.in != nil {
			off = copy(l.rbuf, *c.in)
			l.putBuf(c.in)
			c.in = nil
		}
		n, err := unix.Read(int(c.fd), l.rbuf[off:])
		if n <= 0 {
			switch {
			case err == unix.EAGAIN:
				l.keep(c, l.rbuf[:off])
			case err == unix.EINTR:
				l.keep(c, l.rbuf[:off])
				continue
			default: // EOF or an error: the connection is gone
				l.drop(c, idx, errReset)
			}
			return
		}
		buf := l.rbuf[:off+n]
		for len(buf) > 0 {
			f, k, perr := proto.NextResponse(buf)
			if perr != nil {
				l.drop(c, idx, errProtocol)
				return
			}
			if k == 0 {
				break
			}
			if !l.handle(c, idx, f) {
				return
			}
			buf = buf[k:]
		}
		l.keep(c, buf)
		if off+n < len(l.rbuf) && !hup {
			return
		}
	}
	l.again = append(l.again, idx)
}

// keep saves the start of a split frame for the next read.
func (l *loop) keep(c *uconn, rest []byte) {
	if len(rest) == 0 {
		return
	}
	b := l.getBuf()
	*b = append(*b, rest...)
	c.in = b
}

// readAgain gives the connections that used up their read budget another turn.
func (l *loop) readAgain() {
	again := l.again
	l.again = l.again[len(l.again):]
	for _, idx := range again {
		if c := &l.conns[idx]; c.fd >= 0 && c.state != stConnecting {
			l.read(c, idx, false)
		}
	}
	if len(l.again) == 0 {
		l.again = again[:0]
	} else {
		l.again = append(again[:0], l.again...)
	}
}

// handle acts on one frame from the server. It returns false when it dropped the connection.
func (l *loop) handle(c *uconn, idx uint32, f proto.Frame) bool {
	switch f.Type {
	case proto.Envelope:
		l.c.Pushes[pushEnvelope]++
		if c.state != stReady {
			l.c.Errors[errProtocol]++
			return true
		}
		env, _, _, _ := f.Envelope()
		if b := l.outBuf(c, idx); b != nil {
			*b = proto.AppendOpen(*b, uint64(l.now), env)
			l.sent(c, reqOpen)
		}
		return true
	case proto.ChatDeliver:
		l.c.Pushes[pushChat]++
		l.hists[histDeliver].Record(l.now - int64(f.Stamp))
		return true
	case proto.Pong:
		l.c.Errors[errProtocol]++ // we never PING
		return true
	case proto.Error:
		class := errProtocol
		switch f.ErrorCode() {
		case proto.ErrCodeTooSlow:
			class = errOverload
		case proto.ErrCodeShuttingDown:
			class = errReset
		case proto.ErrCodeLoginTimeout:
			class = errTimeout
		}
		l.drop(c, idx, class)
		return false
	}
	r := answerOf(f.Type)
	if c.inflight[r] == 0 {
		l.c.Errors[errProtocol]++ // an answer to nothing we asked
		return true
	}
	c.inflight[r]--
	c.since = l.nowMs
	st := f.Body[0] // every answer starts with its status
	if st >= maxStatus {
		l.c.Errors[errProtocol]++
		st = maxStatus - 1
	}
	l.c.Status[r][st]++
	if st == overloadStatus[r] {
		l.c.Errors[errOverload]++
	}
	lat := l.now - int64(f.Stamp)
	if f.Stamp > uint64(l.now) || lat > LatencyMax {
		l.c.Errors[errProtocol]++ // not a stamp we sent
	} else {
		l.hists[r].Record(lat)
		if r == reqShake {
			l.live.Record(lat)
		}
	}
	switch r {
	case reqLogin:
		if st != proto.LoginOK {
			// A refused login (bad token, bad user) would be refused again: no reconnect.
			l.c.Errors[errProtocol]++
			l.closeConn(c, &l.c.Lost)
			l.setState(c, stDead)
			return false
		}
		c.fails = 0
		l.setState(c, stReady)
	case reqShake:
		if st == proto.ShakeGot {
			_, _, amount := f.ShakeResult()
			l.c.ShakeAmount += uint64(amount)
		}
	case reqOpen:
		if st == proto.OpenOK {
			_, _, amount := f.OpenResult()
			l.c.OpenAmount += uint64(amount)
		}
	}
	return true
}

// outBuf returns c's output buffer, marking c for this round's flush; nil when c's unwritten
// output is over its limit (the request is counted as dropped).
func (l *loop) outBuf(c *uconn, idx uint32) *[]byte {
	if c.out == nil {
		c.out = l.getBuf()
	} else if len(*c.out) > maxOut {
		l.c.Backlog++
		return nil
	}
	if c.flags&fBlocked == 0 {
		l.markDirty(c, idx)
	}
	return c.out
}

func (l *loop) markDirty(c *uconn, idx uint32) {
	if c.flags&fDirty == 0 {
		c.flags |= fDirty
		l.dirty = append(l.dirty, idx)
	}
}

// sent counts a request of kind r appended to c's output.
func (l *loop) sent(c *uconn, r int) {
	if !c.waiting() {
		c.since = l.nowMs
	}
	c.inflight[r]++
	l.c.Sent[r]++
}

// flush writes each dirty connection's output with one write.
func (l *loop) flush() {
	for _, idx := range l.dirty {
		c := &l.conns[idx]
		c.flags &^= fDirty
		if c.fd < 0 || c.out == nil || c.flags&fBlocked != 0 {
			continue
		}
		out := *c.out
		n, err := unix.Write(int(c.fd), out)
		for err == unix.EINTR {
			n, err = unix.Write(int(c.fd), out)
		}
		switch {
		case err == unix.EAGAIN:
			c.flags |= fBlocked
		case err != nil:
			l.drop(c, idx, errReset)
		case n == len(out):
			l.putBuf(c.out)
			c.out = nil
		default:
			*c.out = out[:copy(out, out[n:])]
			c.flags |= fBlocked // EPOLLOUT comes when the socket has room again
		}
	}
	l.dirty = l.dirty[:0]
}

// drop closes c after an error of class, counts its requests in flight as lost and
// schedules a reconnect, unless the run has ended.
func (l *loop) drop(c *uconn, idx uint32, class int) {
	l.c.Errors[class]++
	l.closeConn(c, &l.c.Lost)
	l.setState(c, stIdle)
	l.retry(c, idx)
}

func (l *loop) closeConn(c *uconn, count *[nReq]uint64) {
	if c.fd >= 0 {
		unix.Close(int(c.fd)) // also removes it from the epoll set
		c.fd = -1
	}
	for r, n := range c.inflight {
		count[r] += uint64(n)
		c.inflight[r] = 0
	}
	if c.in != nil {
		l.putBuf(c.in)
		c.in = nil
	}
	if c.out != nil {
		l.putBuf(c.out)
		c.out = nil
	}
	c.flags = 0
}

// retry schedules a reconnect of c after an exponential backoff with ±25% jitter.
func (l *loop) retry(c *uconn, idx uint32) {
	if l.now >= l.endNs || c.state == stDead {
		return
	}
	d := min(backoffMin<<min(c.fails, 8), backoffMax)
	d = d*3/4 + time.Duration(l.rng.Int64N(int64(d)/2+1))
	if c.fails < 255 {
		c.fails++
	}
	l.retries.push(retryAt{l.now + int64(d), idx})
}

// sweep drops the connections that waited too long: a connect, a login or an answer.
func (l *loop) sweep() {
	connectMs := uint32(l.plan.cfg.ConnectTimeout / time.Millisecond)
	timeoutMs := uint32(l.plan.cfg.Timeout / time.Millisecond)
	for i := range l.conns {
		c := &l.conns[i]
		waited := l.nowMs - c.since
		switch {
		case c.state == stConnecting && waited > connectMs:
			l.drop(c, uint32(i), errConnect)
		case c.state == stLogin && waited > timeoutMs:
			l.drop(c, uint32(i), errTimeout)
		case c.state == stReady && waited > timeoutMs && c.waiting():
			l.drop(c, uint32(i), errTimeout)
		}
	}
}

// closeAll closes every connection at the end of the run; what is still in flight is
// unanswered and counts as a timeout.
func (l *loop) closeAll() {
	before := l.c.Unanswered
	for i := range l.conns {
		c := &l.conns[i]
		l.closeConn(c, &l.c.Unanswered)
		if c.state != stDead {
			l.setState(c, stIdle)
		}
	}
	for r := range nReq {
		l.c.Errors[errTimeout] += l.c.Unanswered[r] - before[r]
	}
}

// publish hands copies of the counters and the latest latencies to the engine.
func (l *loop) publish() {
	l.c.Up, l.c.Connecting = l.up, l.connecting
	l.mu.Lock()
	l.pub = l.c
	l.pubLive.Merge(l.live)
	l.mu.Unlock()
	l.live.Reset()
}

func (l *loop) getBuf() *[]byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	b := make([]byte, 0, 256)
	return &b
}

func (l *loop) putBuf(b *[]byte) {
	if cap(*b) > keepBuf {
		return
	}
	*b = (*b)[:0]
	l.free = append(l.free, b)
}

// retryAt is a reconnect due at a time; retryHeap is a min-heap of them by time (hand-made:
// container/heap would box every entry).
type retryAt struct {
	at  int64
	idx uint32
}

type retryHeap []retryAt

func (h *retryHeap) push(r retryAt) {
	*h = append(*h, r)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *retryHeap) pop() retryAt {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].at < s[m].at {
			m = l
		}
		if r < len(s) && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return top
}
