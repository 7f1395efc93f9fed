//go:build linux

package loadclient

import (
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The event loop itself: its state, how it is built, and its round — wait in epoll until
// the next event or due work, dispatch the events, send, churn and connect what is due,
// flush, sweep for timeouts, publish. Each step lives in a file of its own: dial_linux.go
// (connects, logins, backoff), send_linux.go (the schedule and the pacers), churn_linux.go,
// receive_linux.go (reads and answers), opens_linux.go (OPENs until their final answer),
// output_linux.go (output buffers and writes), uconn_linux.go (a connection's state and how
// it ends).

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
	backoffMax   = time.Second // a user waits at most about this long past a failover; -connect-rate bounds the herd
	cmdIndex     = -1          // epoll data of the loop's eventfd
)

// Loop commands.
const (
	cmdRate = iota
	cmdEnd
	cmdHold   // open no more pushes: the run's figures are final but for the opens under way
	cmdSettle // the drain is over: send no OPEN again, connect nobody more
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
// them; the engine talks to it through the shared fields (commands in, published copies
// out) and the eventfd that wakes it.
type loop struct {
	id    int
	plan  *runPlan
	ep    int
	evfd  int
	first uint32
	conns []uconn
	runUs Range // the run's users, for recipients
	rng   *rand.Rand

	dialer // connects: the queue, the rate, the backoffs
	sender // scheduled sends: the schedule and the pacers
	bufPool
	opens  opens   // OPENs without a final answer: in flight, or to be sent again
	resend resends // SHAKEs sent, and the ones to send again
	hist   history // -history: the money answers told

	now, endNs int64
	base       int64 // origin of the ms clock in uconn.since
	nowMs      uint32

	rbuf   []byte
	dirty  []uint32 // connections with output to write this round
	again  []uint32 // connections that used up their read budget this round
	events []unix.EpollEvent

	nextPublish, nextSweep int64
	up, connecting         int64

	c     counters
	hists [nHist]*LatencyHistogram
	live  *LatencyHistogram // SHAKE latencies since the last publish

	stopped bool
	holding bool // cmdHold came: pushes are counted, not opened (opens under way go on)

	shared
}

// shared is what a loop and its engine exchange, under mu.
type shared struct {
	mu      sync.Mutex
	cmds    []command
	pub     counters
	pubLive *LatencyHistogram
	err     error // a failure of the loop itself (epoll), reported by stop
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
		live:   new(LatencyHistogram),
		shared: shared{pubLive: new(LatencyHistogram)},
		opens:  newOpens(),
		resend: newResends(cfg.RequestIDs, int64(cfg.Timeout)),
		hist:   history{file: plan.history},
		ep:     -1, evfd: -1,
	}
	for i := range l.hists {
		l.hists[i] = new(LatencyHistogram)
	}
	for i := range l.conns {
		l.conns[i] = uconn{fd: -1, user: r.First + uint32(i)}
	}
	l.c.Users = int64(r.Len())
	var err error
	if l.sender, err = newSender(plan, r, l.rng); err != nil {
		return nil, err
	}
	l.dialer = newDialer(id, plan, r)
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
	defer l.hist.flush()
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
		// Sends stop at endNs by their own test, so a send due before the end still goes
		// out when a slow round wakes after it; churns stop at the end, and so do connects,
		// but for users with opens under way, whose OPENs settle money already drawn.
		l.sendDue()
		l.openDue()
		if l.now < l.endNs {
			l.churnDue()
		}
		l.connectDue()
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

// wakeAt returns when the loop has work without an event: the next due send, OPEN sent again,
// connect, retry, publish or sweep; now when work is left over from the last round.
func (l *loop) wakeAt() int64 {
	if len(l.again) > 0 {
		return l.now
	}
	t := min(l.nextPublish, l.nextSweep)
	if !l.havePend {
		if u, at, ok := l.sched.Next(); ok {
			l.pendUser, l.pendAt, l.havePend = u, at, true
		}
	}
	if l.havePend && l.pendAt < l.endNs {
		t = min(t, l.pendAt)
	}
	t = min(t, l.sendP.wake(l.endNs), l.chatP.wake(l.endNs))
	if len(l.opens.due) > 0 {
		t = min(t, l.opens.due[0].at)
	}
	if l.now < l.endNs {
		t = min(t, l.endNs, l.churnP.wake(l.endNs))
	}
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
		case cmdHold:
			l.holding = true
			l.c.Holding = 1
			// At once, not on the grid: the drain must know that no OPEN comes after this copy.
			l.publish()
		case cmdSettle:
			l.opens.settled = true
			l.resend.settle(&l.c)
		case cmdStop:
			l.stopped = true
		}
	}
}

// publish hands copies of the counters and the latest latencies to the engine.
func (l *loop) publish() {
	l.c.Up, l.c.Connecting, l.c.OpenPending, l.c.ShakePending = l.up, l.connecting, l.opens.n, l.resend.pending
	l.mu.Lock()
	l.pub = l.c
	l.pubLive.Merge(l.live)
	l.mu.Unlock()
	l.live.Reset()
}
