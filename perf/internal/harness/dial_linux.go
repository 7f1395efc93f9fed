package harness

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// Dialer opens logged-in client connections with plain syscalls: no
// goroutine, no runtime poller, nothing per connection in this process but
// the descriptor, so a tool can hold as many connections as its open-files
// limit allows and the server's figures are not mixed with a client's.
// Safe for concurrent use. The server must run without -auth-secret.
type Dialer struct {
	Server  netip.AddrPort
	Sources []netip.Addr  // local addresses, user u binds Sources[u mod len]; empty: the kernel's choice
	Timeout time.Duration // for the connect and for the LOGIN_ACK (default 5 s)
}

// Login connects, sends LOGIN for user and waits for LOGIN_ACK status 0. It
// returns the socket: non-blocking, TCP_NODELAY, its input empty.
func (d *Dialer) Login(user uint32) (fd int, err error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	deadline := time.Now().Add(timeout)
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
			fd = -1
		}
	}()
	// Small frames that wait for their answers: Nagle would hold a second
	// one back until the first is acknowledged.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		return -1, os.NewSyscallError("setsockopt TCP_NODELAY", err)
	}
	if len(d.Sources) > 0 {
		// Pick the port at connect, per destination: more than the ~28,000
		// ephemeral ports a bind to port 0 would share across destinations.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
			return -1, os.NewSyscallError("setsockopt IP_BIND_ADDRESS_NO_PORT", err)
		}
		src := d.Sources[int(user)%len(d.Sources)]
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()}); err != nil {
			return -1, fmt.Errorf("user %d: bind %v: %w", user, src, os.NewSyscallError("bind", err))
		}
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: d.Server.Addr().As4(), Port: int(d.Server.Port())})
	if err != nil && err != unix.EINPROGRESS {
		return -1, fmt.Errorf("user %d: %w", user, os.NewSyscallError("connect", err))
	}
	if err := waitFor(fd, unix.POLLOUT, deadline); err != nil {
		return -1, fmt.Errorf("user %d: connect: %w", user, err)
	}
	if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
		return -1, fmt.Errorf("user %d: connect: %w", user, errors.Join(err, unix.Errno(soerr)))
	}
	login := proto.AppendLogin(make([]byte, 0, proto.LoginLen(0)), uint64(user), user, nil)
	if n, err := unix.Write(fd, login); err != nil || n != len(login) { // a fresh socket takes 18 bytes
		return -1, fmt.Errorf("user %d: write LOGIN: %d of %d bytes: %v", user, n, len(login), err)
	}
	var buf [proto.LoginAckLen]byte
	for k := 0; ; {
		if err := waitFor(fd, unix.POLLIN, deadline); err != nil {
			return -1, fmt.Errorf("user %d: waiting for LOGIN_ACK: %w", user, err)
		}
		n, err := unix.Read(fd, buf[k:])
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return -1, fmt.Errorf("user %d: read LOGIN_ACK: closed after %d bytes: %v", user, k, err)
		}
		k += n
		f, m, perr := proto.NextResponse(buf[:k])
		if perr != nil {
			return -1, fmt.Errorf("user %d: LOGIN answer: %w", user, perr)
		}
		if m == 0 {
			continue
		}
		if f.Type != proto.LoginAck {
			return -1, fmt.Errorf("user %d: LOGIN answered %v (% x)", user, f.Type, buf[:k])
		}
		if status, u := f.LoginAck(); status != proto.LoginOK || u != user {
			return -1, fmt.Errorf("user %d: LOGIN_ACK status %d user %d", user, status, u)
		}
		return fd, nil
	}
}

// waitFor polls fd for events until deadline.
func waitFor(fd int, events int16, deadline time.Time) error {
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return os.ErrDeadlineExceeded
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("poll", err)
		}
		if n > 0 {
			if pfd[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 && pfd[0].Revents&events == 0 {
				return errors.New("connection refused or reset")
			}
			return nil
		}
	}
}

// LoginMany logs in users first … first+n−1, workers connections at a time,
// and returns their sockets in user order. On the first failure it stops,
// closes what it opened and returns the error. progress, if not nil, is
// called from one goroutine at a time with the count so far, every 1,000.
func (d *Dialer) LoginMany(first uint32, n, workers int, progress func(done int)) ([]int, error) {
	fds := slices.Repeat([]int{-1}, n)
	var mu sync.Mutex // guards next, done, err and the calls of progress
	next, done := 0, 0
	var err error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= n || err != nil
				mu.Unlock()
				if stop {
					return
				}
				fd, e := d.Login(first + uint32(i))
				mu.Lock()
				if fds[i] = fd; e != nil {
					err = cmp.Or(err, e)
				} else if done++; progress != nil && done%1000 == 0 {
					progress(done)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err != nil {
		CloseAll(fds)
		return nil, err
	}
	return fds, nil
}

// CloseAll closes every descriptor of fds that is not −1.
func CloseAll(fds []int) {
	for i, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
			fds[i] = -1
		}
	}
}

// PingPong sends n PINGs on fd, a socket from Login, in one write and reads
// their n PONGs. n × 12 bytes must fit the socket's send buffer.
func PingPong(fd, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	out := make([]byte, 0, n*proto.PingLen)
	for i := range n {
		out = proto.AppendPing(out, uint64(i))
	}
	if w, err := unix.Write(fd, out); err != nil || w != len(out) {
		return fmt.Errorf("write of %d PINGs: %d of %d bytes: %v", n, w, len(out), err)
	}
	want := n * proto.PongLen
	buf := make([]byte, want)
	for k := 0; k < want; {
		if err := waitFor(fd, unix.POLLIN, deadline); err != nil {
			return fmt.Errorf("waiting for PONGs, %d of %d bytes in: %w", k, want, err)
		}
		m, err := unix.Read(fd, buf[k:])
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil || m == 0 {
			return fmt.Errorf("read PONGs: closed after %d of %d bytes: %v", k, want, err)
		}
		k += m
	}
	for b := buf; len(b) > 0; b = b[proto.PongLen:] {
		if f, m, err := proto.NextResponse(b); err != nil || m != proto.PongLen || f.Type != proto.Pong {
			return fmt.Errorf("want PONG, got % x", b[:proto.PongLen])
		}
	}
	return nil
}
