package ingress

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/conn"
	"github.com/hongbao-io/hongbao/proto"
)

// be is the byte order of the wire.
var be = binary.BigEndian

const (
	// maxPartial is the most a connection keeps between reads: a frame that
	// has not fully arrived.
	maxPartial = proto.MaxFrameLen - 1

	// Accept errors (EMFILE, …) pause accepting for 10 ms, doubling to 1 s.
	acceptBackoffMin = int64(10 * time.Millisecond)
	acceptBackoffMax = int64(time.Second)
)

// Ingress is the read side of the server: it accepts connections, decodes
// their frames and publishes each as an event into the ring of the SET that
// owns its work. It is the conn.Owner of every connection it accepts.
//
// Its methods are safe for concurrent use. Start, StopAccepting, CloseIdle
// and Close are serialized; Stats and Conns may be called at any time. The
// zero value is not usable: build one with New.
type Ingress struct {
	o      Options
	slab   slab
	shards []shard      // one per loop: the counters behind Stats
	conns  atomic.Int64 // open connections: +1 at accept, −1 at release
	vers   sync.Pool    // of *proto.Verifier, for netpoll goroutines
	eng    engine
	closer closer // released sockets wait there for their peer to take what was written

	mu    sync.Mutex // serializes the lifecycle methods
	state int        // stateNew → stateStarted → stateClosed
}

const (
	stateNew = iota
	stateStarted
	stateClosed
)

// engine is one mode's I/O. Its methods are called under Ingress.mu, each
// at most in the order start → stopAccepting, closeIdle → close.
type engine interface {
	watch(ic *iconn) // Owner.WatchWritable
	addrs() []net.Addr
	start()
	stopAccepting()
	closeIdle(code uint8)
	close() error // also when never started
}

// New checks o, binds every listener (so Addrs answers at once) and returns
// an Ingress that accepts nothing until Start.
func New(o Options) (*Ingress, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ing := &Ingress{o: o, shards: make([]shard, o.Loops)}
	if len(o.AuthSecret) > 0 {
		secret := append([]byte(nil), o.AuthSecret...)
		ing.vers.New = func() any { return proto.NewVerifier(secret) }
	}
	ing.slab.init((*owner)(ing))
	var err error
	if o.Mode == ModeEpoll {
		ing.eng, err = newEpoll(ing)
	} else {
		ing.eng, err = newNetpoll(ing)
	}
	if err != nil {
		return nil, err
	}
	return ing, nil
}

// newProc returns a frame handler counting into cnt. withVerifier gives it a
// Verifier of its own (a loop's); otherwise it borrows one per LOGIN.
func (ing *Ingress) newProc(cnt *counters, withVerifier bool) proc {
	p := proc{bus: ing.o.Bus, redirect: ing.o.Redirect, secret: len(ing.o.AuthSecret) > 0, verPool: &ing.vers, cnt: cnt,
		chat:  newChatRate(ing.o.ChatRate, ing.o.ChatBurst),
		frame: (*proc).publish, loggedIn: (*proc).admit, cutOff: (*proc).fatal}
	if ing.o.Bare {
		bareProc(&p)
	}
	if p.secret && withVerifier {
		p.ver = ing.vers.Get().(*proto.Verifier)
	}
	return p
}

// Start starts accepting and reading. It may be called once.
func (ing *Ingress) Start() error {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if ing.state != stateNew {
		return errors.New("ingress: Start after Start or Close")
	}
	ing.state = stateStarted
	ing.eng.start()
	return nil
}

// Addrs returns the bound address of every listener, in Options.Listen
// order: with port 0 the port the system picked.
func (ing *Ingress) Addrs() []net.Addr { return ing.eng.addrs() }

// StopAccepting closes the listeners. Open connections are not affected.
func (ing *Ingress) StopAccepting() {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if ing.state != stateClosed {
		ing.eng.stopAccepting()
	}
}

// CloseIdle writes ERROR code to every connection that has not logged in
// and releases them; it returns when they are closed. Logged-in connections
// belong to their SETs, which the server tells with KShutdown; in Bare mode,
// where no SET exists, CloseIdle closes every connection.
func (ing *Ingress) CloseIdle(code uint8) {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if ing.state == stateStarted {
		ing.eng.closeIdle(code)
	}
}

// Close stops accepting and reading and returns when every loop (netpoll:
// every connection goroutine) has exited. Connections that have not logged
// in (in Bare mode: all) are closed. For each logged-in connection still
// open, Close makes one attempt to publish its KDisconnect, so that its
// egress releases it; the server should have cut them off with KShutdown
// before. Owner methods stay safe to call after Close.
func (ing *Ingress) Close() error {
	ing.mu.Lock()
	defer ing.mu.Unlock()
	if ing.state == stateClosed {
		return nil
	}
	ing.state = stateClosed
	err := ing.eng.close()
	ing.closer.shut(time.Second) // what the peers have not taken in a second they are not taking
	return err
}

// Stats sums the loops' counters. See Stats for when they are updated.
func (ing *Ingress) Stats() Stats {
	var s Stats
	for i := range ing.shards {
		s.add(&ing.shards[i])
	}
	return s
}

// Conns is the number of open connections: accepted and not yet released.
func (ing *Ingress) Conns() int { return int(ing.conns.Load()) }

// release closes ic's socket and returns it to the free list: the end of
// Owner.Release, shared by both modes. The caller is ic's releaser (its
// SET's egress, or the ingress for a connection it owns); ic.c.In is nil.
func (ing *Ingress) release(ic *iconn) {
	fd := ic.c.FD
	ic.c.Recycle() // first, as Owner.Release promises: events carrying the old generation are stale from here
	ing.closer.close(fd, ic.nc)
	ic.nc = nil
	ic.flags = 0
	ing.slab.put(ic)
	ing.conns.Add(-1)
}

// iconnOf returns the record of c, a connection this Ingress accepted.
func (ing *Ingress) iconnOf(c *conn.Conn) *iconn {
	ic := ing.slab.at(uint32(c.Scratch))
	if &ic.c != c {
		panic("BUG: ingress: Owner method called with a Conn it does not own")
	}
	return ic
}

// admit counts a new connection against MaxConns and reports whether it may
// stay. Exact: concurrent accepts cannot overshoot.
func (ing *Ingress) admit() bool {
	n := ing.conns.Add(1)
	if max := ing.o.MaxConns; max > 0 && n > int64(max) {
		ing.conns.Add(-1)
		return false
	}
	return true
}

// owner is the conn.Owner of every connection of an Ingress.
type owner Ingress

// WatchWritable implements conn.Owner.
func (o *owner) WatchWritable(c *conn.Conn) {
	ing := (*Ingress)(o)
	ing.eng.watch(ing.iconnOf(c))
}

// Shutdown implements conn.Owner. It shuts down the read side only: the
// reader sees EOF at once and publishes KDisconnect, while what was
// written stays queued and the FIN goes after it, at the close (see closer).
// Shutting down the write side too would put the socket in FIN-WAIT, where
// the kernel answers any byte the peer still sends with a reset that throws
// away every answer not yet delivered.
func (o *owner) Shutdown(c *conn.Conn) { unix.Shutdown(c.FD, unix.SHUT_RD) }

// Release implements conn.Owner.
func (o *owner) Release(c *conn.Conn) {
	ing := (*Ingress)(o)
	ing.release(ing.iconnOf(c))
}
