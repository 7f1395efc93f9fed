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
