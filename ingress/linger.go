package ingress

import (
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// lingerMax bounds how long a released socket stays open for its peer to
// acknowledge what was written to it.
const lingerMax = 5 * time.Second

// closer closes released sockets once their peer has acknowledged all that
// was written to them, or after lingerMax.
//
// Why: the server releases a connection it cut off (ERROR 5, 6, 8 or a
// violation) once its reader sees EOF, which the shutdown of both directions
// brings at once, while the kernel may still hold answers the peer has not
// acknowledged. Closed then, a socket the peer still sends to is reset, and
// the reset throws those answers away: SHAKE_RESULTs the ledger counted as
// got. Held open until its send queue is empty, the socket delivers them; a
// reset after that loses nothing (what reached the peer's kernel stays
// readable there).
type closer struct {
	mu      sync.Mutex
	socks   []lingering
	running bool // the goroutine that polls socks runs
	closed  bool // Ingress.Close has run: close at once
}

type lingering struct {
	fd    int
	nc    *net.TCPConn // netpoll mode: closed through it
	until time.Time
}

// close closes the socket of fd (nc in netpoll mode) now if nothing written
// to it is unacknowledged, else once it is.
func (cl *closer) close(fd int, nc *net.TCPConn) {
	if unacked(fd) > 0 {
		cl.mu.Lock()
		if !cl.closed {
			cl.socks = append(cl.socks, lingering{fd, nc, time.Now().Add(lingerMax)})
			if !cl.running {
				cl.running = true
				go cl.poll()
			}
			cl.mu.Unlock()
			return
		}
		cl.mu.Unlock()
	}
	closeSocket(fd, nc)
}

func closeSocket(fd int, nc *net.TCPConn) {
	if nc != nil {
		nc.Close()
	} else {
		unix.Close(fd) // also removes it from its epoll: it was never duplicated
	}
}

// poll closes the sockets that are done lingering, every few milliseconds,
// and exits when none is left.
func (cl *closer) poll() {
	for {
		time.Sleep(5 * time.Millisecond)
		cl.mu.Lock()
		now := time.Now()
		kept := cl.socks[:0]
		for _, s := range cl.socks {
			if unacked(s.fd) > 0 && now.Before(s.until) && !cl.closed {
				kept = append(kept, s)
				continue
			}
			closeSocket(s.fd, s.nc)
		}
		clear(cl.socks[len(kept):])
		cl.socks = kept
		if len(kept) == 0 {
			cl.running = false
			cl.mu.Unlock()
			return
		}
		cl.mu.Unlock()
	}
}

// shut waits up to wait for the lingering sockets to be acknowledged, then
// closes those left; later ones close at once.
func (cl *closer) shut(wait time.Duration) {
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		cl.mu.Lock()
		n := len(cl.socks)
		if n == 0 || time.Now().After(deadline) {
			cl.closed = true
			for _, s := range cl.socks {
				closeSocket(s.fd, s.nc)
			}
			cl.socks = nil
			cl.mu.Unlock()
			return
		}
		cl.mu.Unlock()
	}
}
