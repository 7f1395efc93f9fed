package ingress

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenBacklog asks for the largest accept queue: the kernel silently caps
// it at net.core.somaxconn (4096 by default since Linux 5.4). A connection
// ramp of a million clients needs every slot of it.
const listenBacklog = 1 << 16

// listenFD opens a non-blocking listening TCP socket on addr ("host:port";
// an empty or unspecified host listens on every address, IPv4 and IPv6).
func listenFD(addr string, reusePort bool) (int, *net.TCPAddr, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return -1, nil, fmt.Errorf("ingress: cannot listen on %q: %w", addr, err)
	}
	fd, err := bindFD(ta, reusePort)
	if errors.Is(err, unix.EAFNOSUPPORT) && (ta.IP == nil || ta.IP.IsUnspecified()) {
		fd, err = bindFD(&net.TCPAddr{IP: net.IPv4zero, Port: ta.Port}, reusePort) // no IPv6 here
	}
	if err != nil {
		return -1, nil, fmt.Errorf("ingress: cannot listen on %q: %w", addr, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("ingress: cannot listen on %q: %w", addr, os.NewSyscallError("getsockname", err))
	}
	return fd, tcpAddrOf(sa), nil
}

func bindFD(ta *net.TCPAddr, reusePort bool) (fd int, err error) {
	family, sa, err := sockaddrOf(ta)
	if err != nil {
		return -1, err
	}
	fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return -1, os.NewSyscallError("setsockopt SO_REUSEADDR", err)
	}
	if reusePort {
		if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return -1, os.NewSyscallError("setsockopt SO_REUSEPORT", err)
		}
	}
	if family == unix.AF_INET6 && (ta.IP == nil || ta.IP.IsUnspecified()) {
		if err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return -1, os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
	}
	if err = unix.Bind(fd, sa); err != nil {
		return -1, os.NewSyscallError("bind", err)
	}
	if err = unix.Listen(fd, listenBacklog); err != nil {
		return -1, os.NewSyscallError("listen", err)
	}
	return fd, nil
}

func sockaddrOf(ta *net.TCPAddr) (int, unix.Sockaddr, error) {
	if ip4 := ta.IP.To4(); ip4 != nil && ta.IP != nil {
		sa := &unix.SockaddrInet4{Port: ta.Port}
		copy(sa.Addr[:], ip4)
		return unix.AF_INET, sa, nil
	}
	sa := &unix.SockaddrInet6{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To16()) // nil IP: the zero address, "::"
	if ta.Zone != "" {
		ifi, err := net.InterfaceByName(ta.Zone)
		if err != nil {
			return 0, nil, err
		}
		sa.ZoneId = uint32(ifi.Index)
	}
	return unix.AF_INET6, sa, nil
}

func tcpAddrOf(sa unix.Sockaddr) *net.TCPAddr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), sa.Addr[:]...)), Port: sa.Port}
	case *unix.SockaddrInet6:
		a := &net.TCPAddr{IP: net.IP(append([]byte(nil), sa.Addr[:]...)), Port: sa.Port}
		if sa.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				a.Zone = ifi.Name
			}
		}
		return a
	}
	return &net.TCPAddr{}
}
