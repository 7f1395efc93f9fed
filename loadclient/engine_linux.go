//go:build linux

package loadclient

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// epollEngine runs one loop per goroutine; each blocks in epoll_wait on its own thread.
type epollEngine struct {
	loops []*loop
	wg    sync.WaitGroup
}

func newEngine(p *runPlan) (engine, error) {
	if err := checkFiles(p.local.Len()); err != nil {
		return nil, err
	}
	e := &epollEngine{}
	for i, r := range splitRange(p.local, p.cfg.Loops) {
		l, err := newLoop(i, p, r)
		if err != nil {
			for _, l := range e.loops {
				unix.Close(l.ep)
				unix.Close(l.evfd)
			}
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	for _, l := range e.loops {
		e.wg.Add(1)
		go l.run(&e.wg)
	}
	return e, nil
}

// checkFiles refuses a process more users than its open-files limit has descriptors for.
// (Go raises the soft limit to the hard one at start-up, so the hard limit is what counts.)
func checkFiles(users int) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return wrapSyscall("getrlimit", err)
	}
	if uint64(users)+fdMargin > rl.Cur {
		procs := (uint64(users) + rl.Cur - fdMargin - 1) / max(rl.Cur-fdMargin, 1)
		return fmt.Errorf("%d users need %d descriptors, above this process's open-files limit %d (one per user plus %d for the process): run with -procs %d or more, or raise ulimit -n",
			users, uint64(users)+fdMargin, rl.Cur, fdMargin, procs)
	}
	return nil
}

func (e *epollEngine) setRate(qps uint32, atNs int64) {
	for _, l := range e.loops {
		l.command(command{kind: cmdRate, qps: qps, atNs: atNs})
	}
}

func (e *epollEngine) endNow() {
	for _, l := range e.loops {
		l.command(command{kind: cmdEnd})
	}
}

func (e *epollEngine) hold() int {
	for _, l := range e.loops {
		l.command(command{kind: cmdHold})
	}
	return len(e.loops)
}

func (e *epollEngine) settle() {
	for _, l := range e.loops {
		l.command(command{kind: cmdSettle})
	}
}

func (e *epollEngine) poll(total *counters, live *LatencyHistogram) {
	for _, l := range e.loops {
		l.mu.Lock()
		total.add(&l.pub)
		live.Merge(l.pubLive)
		l.pubLive.Reset()
		l.mu.Unlock()
	}
}

func (e *epollEngine) stop() *loadResult {
	for _, l := range e.loops {
		l.command(command{kind: cmdStop})
	}
	e.wg.Wait() // the loops have returned: their fields are ours now
	res := newLoadResult()
	for _, l := range e.loops {
		res.counters.add(&l.c)
		for i, h := range l.hists {
			res.hists[i].Merge(h)
		}
		if l.err != nil {
			res.err = errors.Join(res.err, l.err)
		}
	}
	return res
}

func wrapSyscall(name string, err error) error {
	return os.NewSyscallError(name, err)
}

func sockaddr(a netip.Addr, port int) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Port: port, Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: port, Addr: a.As16()}
}

// noPwait2 is set once epoll_pwait2 (Linux 5.11) turns out to be missing.
var noPwait2 atomic.Bool

// epollWait waits up to timeoutNs (≤ 0: do not block). It uses epoll_pwait2 for its ns
// timeout: epoll_wait's ms would send scheduled requests up to 1 ms late, and the latency,
// counted from the scheduled time, would carry that.
func epollWait(ep int, events []unix.EpollEvent, timeoutNs int64) (int, error) {
	timeoutNs = max(timeoutNs, 0)
	if !noPwait2.Load() {
		ts := unix.NsecToTimespec(timeoutNs)
		r, _, errno := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(ep), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if errno == 0 {
			return int(r), nil
		}
		if errno != unix.ENOSYS {
			return 0, errno
		}
		noPwait2.Store(true)
	}
	return unix.EpollWait(ep, events, int((timeoutNs+999_999)/1_000_000))
}
