package ingress

import "golang.org/x/sys/unix"

// unacked is the number of bytes written to socket fd that its peer has not
// acknowledged: SIOCOUTQ, which is TIOCOUTQ's number (tcp(7)). A socket the
// peer has reset is closed (TCP_CLOSE) and keeps its count, but nothing more
// will be delivered or acknowledged: 0.
func unacked(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.TIOCOUTQ)
	if err != nil || n == 0 {
		return 0
	}
	if info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err != nil || info.State == unix.BPF_TCP_CLOSE {
		return 0
	}
	return n
}
