package ingress

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// stampReader reads a socket with recvmsg and the kernel's receive timestamp
// (SO_TIMESTAMPNS, set on every connection at accept while shedding is on).
// On TCP the kernel reports the timestamp of the last segment the read took
// from the queue (tcp_recv_timestamp), so a read's sample is the wait of its
// newest byte: a lower bound of its oldest's. Its buffers live in the loop,
// so a read allocates nothing (x/sys's Recvmsg makes a Sockaddr and an
// iovec per call).
type stampReader struct {
	msg unix.Msghdr
	iov unix.Iovec
	oob [8]uint64 // control messages; uint64 for their alignment. One SCM_TIMESTAMPNS takes 32 bytes.
}

// read reads into p and returns the receive timestamp in unix ns, or 0 when
// the kernel gave none.
func (r *stampReader) read(fd int, p []byte) (n int, ts int64, err error) {
	r.iov.Base = unsafe.SliceData(p)
	r.iov.SetLen(len(p))
	r.msg.Iov = &r.iov
	r.msg.SetIovlen(1)
	r.msg.Control = (*byte)(unsafe.Pointer(&r.oob[0]))
	r.msg.SetControllen(int(unsafe.Sizeof(r.oob)))
	r.msg.Flags = 0
	got, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.msg)), 0)
	if errno != 0 {
		return 0, 0, errno
	}
	return int(got), r.timestamp(), nil
}

// timestamp finds SCM_TIMESTAMPNS among the control messages of the last read.
func (r *stampReader) timestamp() int64 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&r.oob[0])), int(r.msg.Controllen))
	hdr := unix.CmsgLen(0)
	for len(b) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < hdr || l > len(b) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
			return (*unix.Timespec)(unsafe.Pointer(&b[hdr])).Nano()
		}
		b = b[min(unix.CmsgSpace(l-hdr), len(b)):]
	}
	return 0
}

// stampConn asks the kernel to timestamp what fd receives.
func stampConn(fd int) { unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) }

// shedding is a loop's shedding by delay, chosen once in newLoop: delayShed
// with Options.ShedDelay, noShed without it and in Bare mode.
type shedding interface {
	// watch has the kernel timestamp what a new connection receives.
	watch(fd int)
	// endRound closes the round that ended at now, before the loop waits.
	endRound(now int64)
	// stamps reports whether the reads of the round whose epoll_wait
	// returned at now are timestamped; full: it returned every event it
	// had room for, so more were ready.
	stamps(now int64, full bool) bool
	// sample takes how long a read's newest byte waited (0: not measured)
	// and reports whether the read's SHAKEs and CHATs are refused.
	sample(wait int64) bool
}

// noShed never sheds, and never timestamps a read.
type noShed struct{}

func (noShed) watch(int)               {}
func (noShed) endRound(int64)          {}
func (noShed) stamps(int64, bool) bool { return false }
func (noShed) sample(int64) bool       { return false }

// delayShed is the shedder of one loop and the gate of its timestamps.
type delayShed struct {
	shedder
	lastRound int64 // unix ns when the previous epoll_wait returned
	lastFull  bool  // it returned a full batch of events: more were ready
}

func newDelayShed(target int64) *delayShed { return &delayShed{shedder: newShedder(target)} }

func (d *delayShed) watch(fd int) { stampConn(fd) }

// stamps decides whether the reads of the round are timestamped. Without a
// timestamp a read costs a plain read(2); with one, recvmsg(2) and a clock
// read. When the previous epoll_wait left nothing ready behind, whatever
// this round reads became ready after it, so it has waited at most the time
// since then plus this round's own work: when that cycle is under half the
// target, nothing this round reads can be near the target and the reads go
// untimestamped. Two kinds of reads escape that bound: the rest of an input
// over ReadBudget, and the input of a connection whose reading a full ring
// paused; the first is one client's own backlog, the second the full ring's
// overload, which its refusals answer. A round that is slow all by itself
// (descheduled mid-round) shows as a long cycle to the next one; the
// interval the shedder waits before refusing covers that one round.
func (d *delayShed) stamps(now int64, full bool) bool {
	stamp := d.busy() || d.lastFull || now-d.lastRound > d.target/2
	d.lastRound, d.lastFull = now, full
	return stamp
}
