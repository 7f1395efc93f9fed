package ingress

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestParkerAllocs: a loop parked in the netpoller wakes for an event on its
// epoll and at its deadline, and neither wait allocates.
func TestParkerAllocs(t *testing.T) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(efd), Pad: tagWake}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		t.Fatal(err)
	}
	events := make([]unix.EpollEvent, 4)
	p, err := newParker(epfd, events)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	one, b := [8]byte{1}, make([]byte, 8)
	// An event written while the loop is parked (it has had 20 ms to park)
	// wakes it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := p.wait(-1); n != 1 || err != nil || events[0].Pad != tagWake {
			t.Errorf("wait: %d events (tag %d), %v; want the eventfd's", n, events[0].Pad, err)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	unix.Write(efd, one[:])
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a parked wait did not wake for an event on its epoll")
	}
	unix.Read(efd, b)
	if n, err := p.wait(1); n != 0 || err != nil {
		t.Fatalf("wait(1 ms) with nothing ready: %d events, %v", n, err)
	}

	allocs := testing.AllocsPerRun(100, func() {
		unix.Write(efd, one[:])
		if n, err := p.wait(-1); n != 1 || err != nil {
			t.Fatalf("wait: %d events, %v", n, err)
		}
		unix.Read(efd, b)
		if n, err := p.wait(1); n != 0 || err != nil {
			t.Fatalf("wait(1 ms): %d events, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event and deadline; want 0", allocs)
	}
}
