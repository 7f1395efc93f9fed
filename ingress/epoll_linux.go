package ingress

import (
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"hongbao/proto"
)

const (
	epollSupported = true
	defaultMode    = ModeEpoll
)

// epoll_event data: Fd holds the descriptor, Pad a tag. A tag ≥ 0 is a
// connection's slab id; the negative ones name the loop's own descriptors.
const (
	tagWake    = -1 // the loop's eventfd
	tagListen0 = -2 // listener i has tag tagListen0 - i
)

// eventsPerWait is how many ready descriptors one epoll_wait returns at
// most; the rest wait for the next round (level-triggered, nothing is lost).
const eventsPerWait = 512

// epollEngine runs Options.Loops event loops, each a goroutine blocked in its
// own epoll_wait, sharing the listeners (see accept_linux.go).
type epollEngine struct {
	ing   *Ingress
	lns   []listenSocket
	loops []*loop
	wg    sync.WaitGroup // running loops

	// Lifecycle, under Ingress.mu.
	started   bool
	listening bool // the listeners are open

	// Owner calls from egress goroutines (WatchWritable) use a loop's epfd;
	// Close sets gone, then waits for inflight to drain before closing the
	// epfds, so such a call never reaches a descriptor that was closed and
	// perhaps reused.
	gone     atomic.Bool
	inflight atomic.Int64
}

type listenSocket struct {
	fd   int
	addr *net.TCPAddr
}

func newEpoll(ing *Ingress) (_ engine, err error) {
	e := &epollEngine{ing: ing, listening: true}
	defer func() {
		if err != nil {
			e.closeFDs()
		}
	}()
	for _, a := range ing.o.Listen {
		fd, addr, err := listenFD(a, ing.o.ReusePort)
		if err != nil {
			return nil, err
		}
		e.lns = append(e.lns, listenSocket{fd, addr})
	}
	for i := range ing.o.Loops {
		l, err := newLoop(e, i)
		if err != nil {
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	return e, nil
}

func (e *epollEngine) addrs() []net.Addr {
	as := make([]net.Addr, len(e.lns))
	for i, ln := range e.lns {
		as[i] = ln.addr
	}
	return as
}

func (e *epollEngine) start() {
	e.started = true
	for _, l := range e.loops {
		e.wg.Add(1)
		go l.run()
	}
}

func (e *epollEngine) stopAccepting() {
	if !e.listening {
		return
	}
	e.listening = false
	if !e.started {
		for _, l := range e.loops { // not running: closing the listeners takes them out of every epoll
			l.accepting, l.listening = false, false
		}
	} else {
		// Each loop takes the listeners out of its epoll before they close, so
		// no loop calls accept on a descriptor number that may be reused.
		e.each(func(l *loop) { l.stopAccepting() })
	}
	for _, ln := range e.lns {
		unix.Close(ln.fd)
	}
}

func (e *epollEngine) closeIdle(code uint8) {
	e.each(func(l *loop) { l.closeIdle(code) })
}

func (e *epollEngine) close() error {
	e.stopAccepting()
	if e.started {
		e.each(func(l *loop) { l.quit = true })
		e.wg.Wait()
	}
	e.gone.Store(true) // no new Owner call touches an epfd from here
	for e.inflight.Load() != 0 {
		runtime.Gosched()
	}
	e.closeFDs()
	return nil
}

func (e *epollEngine) closeFDs() {
	if e.listening {
		for _, ln := range e.lns {
			unix.Close(ln.fd)
		}
		e.listening = false
	}
	for _, l := range e.loops {
		l.closeFDs()
	}
}

// command is work for a loop from a lifecycle method; run executes on the
// loop's goroutine after the round's events, then done is marked.
type command struct {
	run  func(*loop)
	done *sync.WaitGroup
}

// each runs fn on every loop and waits until all have run it.
func (e *epollEngine) each(fn func(*loop)) {
	var wg sync.WaitGroup
	wg.Add(len(e.loops))
	for _, l := range e.loops {
		l.cmds <- command{fn, &wg}
		l.wake()
	}
	wg.Wait()
}

// loop is one event loop: a goroutine that owns an epoll instance, the
// connections it accepted (until each logs in and then until its
// KDisconnect), one read buffer and one frame handler.
//
// Each round: epoll_wait; for every ready connection one read of at most
// ReadBudget bytes, decoded and published at once; then retries of what full
// rings refused, login timeouts, commands, and one flush of the counters.
// The budget keeps a busy connection from starving the others: what it has
// left is still readable, so level-triggered epoll reports it next round.
type loop struct {
	e      *epollEngine
	ing    *Ingress
	slab   *slab
	idx    int
	epfd   int
	wakefd int
	events []unix.EpollEvent
	park   *parker // nil: block in a raw epoll_wait (Options.NetpollWait off)
	buf    []byte  // the read buffer: a kept partial frame, then up to budget new bytes
	budget int
	p      proc
	cnt    counters
	sh     *shard

	// Shedding by delay (see the package doc); shed.target 0: off.
	shed      shedder
	sr        stampReader
	stamp     bool  // this round's reads are timestamped
	lastRound int64 // unix ns when the previous epoll_wait returned
	lastFull  bool  // it returned eventsPerWait events: more were ready

	pre     list        // connections not logged in, in accept order: the head times out first
	live    list        // logged-in connections (Bare: all logged-in ones)
	pending []pendEntry // connections with something a full ring refused (fQueued)

	marked []bool  // by SET: published into since the last runSETs (run_linux.go)
	toRun  []int32 // the marked SETs, in the order first marked

	cmds chan command
	quit bool

	accepting  bool  // listeners not stopped
	listening  bool  // listeners in this epoll
	accBackoff int64 // ns; 0 while accepts succeed
	accRetryAt int64 // unix ns at which to put the listeners back; 0: none
}

// pendEntry names a queued connection by generation: one that the loop
// released meanwhile (login timeout, CloseIdle) is skipped without touching
// more than its atomic generation.
type pendEntry struct{ id, gen uint32 }

func newLoop(e *epollEngine, idx int) (_ *loop, err error) {
	ing := e.ing
	l := &loop{
		e: e, ing: ing, slab: &ing.slab, idx: idx, epfd: -1, wakefd: -1,
		events: make([]unix.EpollEvent, eventsPerWait),
		buf:    make([]byte, maxPartial+ing.o.ReadBudget),
		budget: ing.o.ReadBudget,
		sh:     &ing.shards[idx],
		cmds:   make(chan command, 1),
	}
	if !ing.o.Bare {
		l.shed = newShedder(int64(ing.o.ShedDelay))
	}
	l.p = ing.newProc(&l.cnt, true)
	l.runningSETs()
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if l.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(l.epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.wakefd), Pad: tagWake}
	if err = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.wakefd, &ev); err == nil {
		l.accepting = true
		err = l.listen()
	}
	if err == nil && ing.o.NetpollWait {
		l.park, err = newParker(l.epfd, l.events)
	}
	if err != nil {
		l.closeFDs()
		return nil, err
	}
	return l, nil
}

func (l *loop) run() {
	defer l.e.wg.Done()
	for !l.quit {
		now := l.ing.o.Now()
		if l.shed.target > 0 {
			l.shed.endRound(now)
		}
		n, err := l.wait(l.timeout(now))
		if err != nil && err != unix.EINTR {
			panic("BUG: ingress: epoll_wait: " + err.Error())
		}
		now = l.ing.o.Now()
		if l.shed.target > 0 {
			l.gateStamps(now, n)
		}
		woken := false
		for i := range max(n, 0) {
			ev := &l.events[i]
			switch tag := ev.Pad; {
			case tag >= 0:
				l.onConn(l.slab.at(uint32(tag)), ev.Events, now)
			case tag == tagWake:
				var b [8]byte
				unix.Read(l.wakefd, b[:])
				woken = true
			default:
				l.accept(int(tagListen0 - tag))
			}
			if i%runEvery == runEvery-1 {
				l.runSETs()
				// The next reads' clock (RecvNs): a request read late in a
				// long round waited for the reads before it in the kernel,
				// not in the server.
				now = l.ing.o.Now()
			}
		}
		if len(l.pending) > 0 {
			l.retry(now)
		}
		l.runSETs()
		l.expire(now)
		if l.accRetryAt != 0 && now >= l.accRetryAt {
			if err := l.listen(); err != nil {
				l.ing.o.Logger.Error("ingress: cannot resume accepting", "loop", l.idx, "err", err)
				l.pauseAccept(now)
			}
		}
		if woken { // after the events: a command may release connections they name
			l.runCommands()
		}
		l.cnt.flush(l.sh) // this round's counts visible to Stats
		if n > 0 && !l.p.bare && !l.ing.o.NoYield {
			// Run the SET goroutines this round woke before blocking in
			// epoll_wait: they sit in this P's run queue, and a thread
			// blocked in a raw syscall keeps its P, so otherwise each
			// wake-up costs another thread's wake (or waits for sysmon to
			// take the P). Measured at 30,000 QPS over 19,000 connections:
			// server CPU per SHAKE −25 %, SHAKE p99 6.4 → 0.9 ms.
			runtime.Gosched()
		}
	}
	l.exit()
}

// gateStamps decides whether the reads of the round whose epoll_wait just
// returned n events at now are timestamped. Without a timestamp a read costs
// a plain read(2); with one, recvmsg(2) and a clock read. When the previous
// epoll_wait left nothing ready behind (it returned fewer than
// eventsPerWait), whatever this round reads became ready after it, so it has
// waited at most the time since then plus this round's own work: when that
// cycle is under half the target, nothing this round reads can be near the
// target and the reads go untimestamped. Two kinds of reads escape that
// bound: the rest of an input over ReadBudget, and the input of a connection
// whose reading a full ring paused; the first is one client's own backlog,
// the second the full ring's overload, which its refusals answer. A round
// that is slow all by itself (descheduled mid-round) shows as a long cycle
// to the next one; the interval the shedder waits before refusing covers
// that one round.
func (l *loop) gateStamps(now int64, n int) {
	l.stamp = l.shed.busy() || l.lastFull || now-l.lastRound > l.shed.target/2
	l.lastRound, l.lastFull = now, n == len(l.events)
}

// timeout is how long epoll_wait may sleep, in ms: until the oldest
// connection's login deadline or the accept retry; 1 ms while something
// waits for room in a ring; forever (-1) when nothing is due.
func (l *loop) timeout(now int64) int {
	if len(l.pending) > 0 {
		return 1
	}
	wait := int64(-1)
	if ic := l.slab.front(&l.pre); ic != nil {
		wait = ic.c.Accepted + int64(l.ing.o.LoginTimeout) - now
	}
	if l.accRetryAt != 0 && (wait < 0 || l.accRetryAt-now < wait) {
		wait = l.accRetryAt - now
	}
	switch {
	case wait == -1:
		return -1
	case wait <= 0:
		return 0
	}
	return int(min((wait+999_999)/1_000_000, 1<<30)) // round up: waking early would spin
}

// wait is the round's epoll_wait with a timeout in ms (-1: none). A loop
// that parks polls first, so that a busy round, which finds events at once,
// sets no deadline.
func (l *loop) wait(timeoutMs int) (int, error) {
	if l.park == nil || timeoutMs == 0 {
		return unix.EpollWait(l.epfd, l.events, timeoutMs)
	}
	if n, err := unix.EpollWait(l.epfd, l.events, 0); n != 0 || err != nil {
		return n, err
	}
	return l.park.wait(timeoutMs)
}

func (l *loop) closeFDs() {
	if l.park != nil {
		l.park.close()
	}
	unix.Close(l.epfd)
	unix.Close(l.wakefd)
}

func (l *loop) wake() {
	one := [8]byte{1} // eventfd counts by a u64 in host order; any non-zero value wakes
	unix.Write(l.wakefd, one[:])
}

func (l *loop) runCommands() {
	for {
		select {
		case c := <-l.cmds:
			c.run(l)
			c.done.Done()
		default:
			return
		}
	}
}

// exit closes the connections the loop owns and hands the logged-in ones to
// their egress with one attempt at KDisconnect.
func (l *loop) exit() {
	for ic := l.slab.front(&l.pre); ic != nil; ic = l.slab.front(&l.pre) {
		l.end(ic, nil)
	}
	for ic := l.slab.front(&l.live); ic != nil; ic = l.slab.front(&l.live) {
		if l.p.bare {
			l.end(ic, nil)
		} else if !l.disconnect(ic) { // ring full or closed: left open
			l.keep(ic, nil)
			l.slab.remove(&l.live, ic)
			ic.flags = 0
		}
	}
	l.pending = nil
	l.cnt.flush(l.sh)
}

func (l *loop) closeIdle(code uint8) {
	for ic := l.slab.front(&l.pre); ic != nil; ic = l.slab.front(&l.pre) {
		l.end(ic, proto.AppendError(l.p.out[:0], 0, code))
	}
	if l.p.bare {
		for ic := l.slab.front(&l.live); ic != nil; ic = l.slab.front(&l.live) {
			l.end(ic, proto.AppendError(l.p.out[:0], 0, code))
		}
	}
}

// expire closes the connections whose login time is up: ERROR 7.
func (l *loop) expire(now int64) {
	limit := int64(l.ing.o.LoginTimeout)
	for ic := l.slab.front(&l.pre); ic != nil && now-ic.c.Accepted >= limit; ic = l.slab.front(&l.pre) {
		l.cnt[cLoginTimeouts]++
		l.end(ic, proto.AppendError(l.p.out[:0], 0, proto.ErrCodeLoginTimeout))
	}
}
