package ingress_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// TestAcceptBackoff runs the process out of descriptors: accept fails with
// EMFILE, the ingress backs off and keeps reading, and accepts the waiting
// connection once descriptors are free again.
func TestAcceptBackoff(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		ing := serve(t, ingress.Options{Mode: mode, Bare: true})
		old := dial(t, ing)
		old.send(loginFrame(1, 1))
		old.expect(proto.LoginAck, 1)

		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		probe, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		low := lim
		low.Cur = uint64(probe) + 32
		var fill []int
		restore := func() {
			for _, fd := range fill {
				unix.Close(fd)
			}
			fill = nil
			unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
		}
		defer restore()
		fill = append(fill, probe)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
			t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
		}
		for { // take every descriptor below the limit
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				break
			}
			fill = append(fill, fd)
		}
		unix.Close(fill[len(fill)-1]) // one for the client's socket
		fill = fill[:len(fill)-1]
		c := dial(t, ing) // the kernel completes the handshake; the server cannot accept it
		waitFor(t, "an accept error", func() bool { return ing.Stats().AcceptErrors > 0 })
		old.send(proto.AppendPing(nil, 2)) // reading goes on meanwhile
		old.expect(proto.Pong, 2)
		restore()
		c.send(loginFrame(3, 2))
		c.expect(proto.LoginAck, 3)
		waitStats(t, ing, "2 accepted", func(s ingress.Stats) bool { return s.Accepted == 2 })
	})
}
