// Package conn holds the Conn shared by a connection's two owners: the
// ingress event loop that reads it and the egress stage of its SET that writes
// it. Every field says which of them owns it; nothing here is locked. It does
// no I/O and knows nothing of the ring or the business: it imports no other
// hongbao package.
package conn

import (
	"sync/atomic"

	"github.com/valyala/bytebufferpool"
)

// Owner is the ingress that accepted a Conn. Egress calls it from the SET's
// egress goroutine; implementations must be safe for that.
type Owner interface {
	// WatchWritable asks to be told when c's socket is writable again: the
	// owner then publishes a KWritable event for c into c's SET.
	WatchWritable(c *Conn)
	// Shutdown stops c's input without freeing its descriptor, so the reader
	// sees EOF and publishes KDisconnect; what was written to c still reaches
	// the peer (Release closes only once it has, or gives up).
	Shutdown(c *Conn)
	// Release closes c's descriptor (once the peer has acknowledged what was
	// written to it, or after a few seconds) and recycles c. Called exactly once, by the
	// egress of c's SET when it handles c's KDisconnect, or by the ingress
	// itself for a connection that never logged in. c.Gen moves on first, so
	// events still carrying the old generation are dropped.
	Release(c *Conn)
}

// Conn is one client connection.
//
// Lifecycle: the ingress accepts it and reads it. Once the ingress publishes
// its LOGIN, the egress of the user's SET is the only writer and the only one
// that may release it; before that the ingress alone writes (pre-login
// errors) and releases it. The descriptor is closed only by Release, after
// every writer is done with it, so a stale event can never write to a newer
// connection that got the same descriptor number.
type Conn struct {
	FD    int   // the socket; set at accept, constant until Release
	Owner Owner // the ingress that accepted it

	gen atomic.Uint32 // generation: bumped by Recycle; events carry the one they saw

	// Owned by the session stage of SET: CHAT_DELIVER bytes it routed to
	// this connection (mod 2³²), for ChatBacklog.
	ChatQueued uint32

	// Owned by the ingress event loop.
	User     uint32                     // 0 until LOGIN is published
	SET      int32                      // the user's SET, valid once User != 0
	In       *bytebufferpool.ByteBuffer // bytes of a partial frame; nil when idle
	Accepted int64                      // unix ns, for the login timeout
	Scratch  uintptr                    // free for the owner's bookkeeping (e.g. list links)
	ChatTAT  int64                      // the CHAT rate's token bucket, as GCRA's theoretical arrival time (unix ns); 0: full

	// Owned by the egress of SET.
	Out      *bytebufferpool.ByteBuffer // output not yet written; nil when idle
	Sent     int                        // bytes of Out already written
	Watching bool                       // WatchWritable called, KWritable not yet seen
	Dead     bool                       // closed or cut off: output is dropped
	Dirty    bool                       // has output appended in the current batch
	Draining bool                       // cut off (ERROR 6): its backlog and the ERROR are still being written
	ChatOut  uint32                     // CHAT_DELIVER bytes appended to Out (mod 2³²)
	// backlog is the unwritten output less ChatOut (mod 2³²) as of the
	// egress's last write: one atomic, so that the session, on another
	// goroutine when the stages are pipelined, reads a consistent pair.
	backlog atomic.Uint32
}

// ChatBacklog is the unwritten output c will hold once the chats its
// session routed to it are appended: the unwritten output at the egress's
// last write plus the chats routed to c that the egress had not appended
// by then. Answers and pushes appended since that write count from the next
// one. Exact mod 2³², and the true sum is far below it (-max-pending plus a
// ring of chats). Called by the session of c's SET only.
func (c *Conn) ChatBacklog() uint32 { return c.ChatQueued + c.backlog.Load() }

// SetBacklog publishes c's unwritten output for ChatBacklog. Called by the
// egress of c's SET after it appended to c's output and wrote it.
func (c *Conn) SetBacklog(unwritten int) { c.backlog.Store(uint32(unwritten) - c.ChatOut) }

// Gen is c's current generation. Safe for concurrent use.
func (c *Conn) Gen() uint32 { return c.gen.Load() }

// Recycle bumps the generation, returns any pooled buffer and clears every
// field but FD and Owner, which the next user of c sets. Only the Conn's
// releaser calls it.
func (c *Conn) Recycle() {
	c.gen.Add(1) // from here on, events carrying the old generation are stale
	if c.In != nil {
		bytebufferpool.Put(c.In)
	}
	if c.Out != nil {
		bytebufferpool.Put(c.Out)
	}
	c.User, c.SET, c.In, c.Accepted, c.Scratch, c.ChatTAT = 0, 0, nil, 0, 0, 0
	c.ChatQueued = 0
	c.Out, c.Sent, c.Watching, c.Dead, c.Dirty, c.Draining, c.ChatOut = nil, 0, false, false, false, false, 0
	c.backlog.Store(0)
}

// Handle names one generation of a Conn: a closed connection's handle stays
// stale even after its Conn is reused.
type Handle struct {
	C   *Conn
	Gen uint32
}

// HandleOf returns the handle of c's current generation.
func HandleOf(c *Conn) Handle { return Handle{C: c, Gen: c.Gen()} }

// Live reports whether h still names an open generation.
func (h Handle) Live() bool { return h.C != nil && h.C.gen.Load() == h.Gen }
