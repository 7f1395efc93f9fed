package ingress

import (
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// loop is one event loop: a goroutine that owns an epoll instance, the
// connections it accepted (until each logs in and then until its
// KDisconnect), one read buffer and one frame handler.
//
// Each round: epoll_wait; for every ready connection one read of at most
// ReadBudget bytes, decoded and published at once; then retries of what full
// rings refused, login timeouts, commands, and one flush of the counters.
// The budget keeps a busy connection from starving the others: what it has
// left is still readable, so level-triggered epoll reports it next round.
//
// Every mode (Options.Bare, Handoff, NetpollWait, NoYield, ShedDelay) is
// chosen once, in newLoop, as the function values and small types below:
// nothing on the loop's path tests an option.
type loop struct {
	e      *epollEngine
	ing    *Ingress
	slab   *slab
	idx    int
	epfd   int
	wakefd int
	events []unix.EpollEvent
	buf    []byte // the read buffer: a kept partial frame, then up to budget new bytes
	budget int
	p      proc
	cnt    counters
	sh     *shard

	wt       waiter              // how an idle loop blocks: rawWait, or parker (Options.NetpollWait)
	yield    func()              // after a round with events: runtime.Gosched, or nothing (Bare, NoYield)
	shed     shedding            // shedding by delay: delayShed, or noShed
	loggedIn func(*loop, *iconn) // a LOGIN went through: handOver, or keepBare
	stamp    bool                // this round's reads are timestamped (shed.stamps), with sr
	sr       stampReader

	pre     list        // connections not logged in, in accept order: the head times out first
	live    list        // logged-in connections, handed to their SETs
	kept    list        // logged-in connections the ingress keeps (Bare)
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
	o := &ing.o
	l := &loop{
		e: e, ing: ing, slab: &ing.slab, idx: idx, epfd: -1, wakefd: -1,
		events: make([]unix.EpollEvent, eventsPerWait),
		buf:    make([]byte, maxPartial+o.ReadBudget),
		budget: o.ReadBudget,
		sh:     &ing.shards[idx],
		cmds:   make(chan command, 1),

		yield: runtime.Gosched, shed: noShed{}, loggedIn: (*loop).handOver,
	}
	// Every mode is chosen here, once (newProc chooses the frames' own).
	l.p = ing.newProc(&l.cnt, true)
	if o.Bare { // no SET to yield to, to run or to shed for
		l.yield, l.loggedIn = func() {}, (*loop).keepBare
	} else {
		if o.ShedDelay > 0 {
			l.shed = newDelayShed(int64(o.ShedDelay))
		}
		if o.NoYield {
			l.yield = func() {}
		}
		if !o.Handoff {
			l.runningSETs()
		}
	}
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	l.wt = &rawWait{l.epfd, l.events}
	if l.wakefd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(l.epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.wakefd), Pad: tagWake}
	if err = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.wakefd, &ev); err == nil {
		l.accepting = true
		err = l.listen()
	}
	if err == nil && o.NetpollWait {
		var p *parker
		if p, err = newParker(l.epfd, l.events); err == nil {
			l.wt = p
		}
	}
	if err != nil {
		l.closeFDs()
		return nil, err
	}
	return l, nil
}

func (l *loop) run() {
	defer l.e.wg.Done()
	now := l.ing.o.Now()
	for !l.quit {
		n, err := l.wt.wait(l.timeout(now))
		switch {
		case err == unix.EINTR:
			// A signal, not a round: it read nothing, so it must not pass
			// for a round read fresh and break the shedder's run.
			now = l.ing.o.Now()
			continue
		case err != nil:
			panic("BUG: ingress: epoll_wait: " + err.Error())
		}
		now = l.ing.o.Now()
		l.stamp = l.shed.stamps(now, n == len(l.events))
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
		now = l.ing.o.Now()
		l.shed.endRound(now)
		if n > 0 {
			// The SET goroutines this round woke sit in this P's run queue,
			// and a thread blocked in a raw epoll_wait keeps its P
			// (docs/DESIGN.md, Epoll loops yield after a round).
			l.yield()
		}
	}
	l.exit()
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

func (l *loop) closeFDs() {
	if l.wt != nil {
		l.wt.close()
	}
	unix.Close(l.epfd)
	unix.Close(l.wakefd)
}

func (l *loop) wake() {
	one := [8]byte{1} // eventfd counts by a u64 in host order; any non-zero value wakes
	unix.Write(l.wakefd, one[:])
}

// command is work for a loop from a lifecycle method; run executes on the
// loop's goroutine after the round's events, then done is marked.
type command struct {
	run  func(*loop)
	done *sync.WaitGroup
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
	for _, ls := range [...]*list{&l.pre, &l.kept} {
		for ic := l.slab.front(ls); ic != nil; ic = l.slab.front(ls) {
			l.end(ic, nil)
		}
	}
	for ic := l.slab.front(&l.live); ic != nil; ic = l.slab.front(&l.live) {
		if !l.disconnect(ic) { // ring full or closed: left open
			l.keep(ic, nil)
			l.slab.remove(&l.live, ic)
			ic.flags = 0
		}
	}
	l.pending = nil
	l.cnt.flush(l.sh)
}

// closeIdle closes every connection the loop owns with ERROR code: those not
// logged in, and in Bare mode the logged-in ones too.
func (l *loop) closeIdle(code uint8) {
	for _, ls := range [...]*list{&l.pre, &l.kept} {
		for ic := l.slab.front(ls); ic != nil; ic = l.slab.front(ls) {
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
