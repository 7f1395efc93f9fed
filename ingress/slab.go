package ingress

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/hongbao-io/hongbao/conn"
)

// iconn is the ingress's record of one connection: the conn.Conn that the
// stages see (as &ic.c) and the bookkeeping only the ingress reads. An idle
// connection has nothing else on the Go heap (no read buffer, no goroutine
// in epoll mode).
//
// Ownership: id is constant. ev is shared with the egress (WatchWritable)
// and only changed by compare-and-swap. Everything else belongs to the loop
// (netpoll: the goroutine) that accepted the connection, from accept until it
// publishes KDisconnect or releases the connection itself; on the free list
// it belongs to the slab's mutex.
type iconn struct {
	c conn.Conn // c.Scratch holds id, so that Owner methods find ic from c

	id    uint32
	prev  uint32 // id+1 of the neighbours in the loop's list (0: none);
	next  uint32 // next also links the free list
	loop  uint16 // index of the accepting loop (epoll)
	flags uint16 // loop state: fPre, fStalled, …

	ev atomic.Uint32 // epoll interest: evWantOut | evPaused | evGone, plus a version (see interest_linux.go)

	nc *net.TCPConn // netpoll mode only
}

// Loop state of a connection (iconn.flags).
const (
	fPre      = 1 << iota // not logged in: in the loop's pre list (else in live, or kept)
	fKept                 // logged in and kept by the ingress (Bare): in the loop's kept list
	fStalled              // c.In holds frames a full ring refused: input paused, queued for retry
	fFatal                // KFatal published: input paused and ignored until the peer goes
	fEOF                  // the read side ended, out of epoll: KDisconnect to publish
	fUnread               // with fEOF: the socket may still hold input (HUP or ERR came while stalled)
	fWritable             // KWritable to publish
	fQueued               // in the loop's pending list

	fOwned = fPre | fKept // the ingress writes and releases it itself
)

// Slab chunks hold 1024 connections: big enough that growing to a million
// costs a thousand allocations, small enough that a server with a few
// connections does not reserve much.
const (
	chunkShift = 10
	chunkLen   = 1 << chunkShift
	chunkMask  = chunkLen - 1
)

// slab stores every iconn of an Ingress in fixed chunks that are never freed
// or moved, so a connection is named by a 32-bit id (kept in epoll_event's
// data and in conn.Scratch) and found again by indexing, without a map and
// without putting a Go pointer where the kernel or a uintptr keeps it.
//
// Rejected: a map fd → *Conn per loop (tens of bytes per entry plus
// rehashing pauses at a million entries) and a table indexed by fd (one per
// loop, each as long as the highest fd: loops × 8 bytes per connection, and
// fd numbers are process-wide).
//
// get and put are safe for concurrent use (put is called by egress
// goroutines through Owner.Release); at is lock-free.
type slab struct {
	mu     sync.Mutex
	free   uint32                             // id+1 of the top of the free stack; 0: empty
	used   uint32                             // ids handed out so far: [0, used)
	chunks atomic.Pointer[[]*[chunkLen]iconn] // replaced (copied) on growth, so readers need no lock
	owner  conn.Owner                         // set in every new iconn's c.Owner
}

func (s *slab) init(owner conn.Owner) {
	s.owner = owner
	s.chunks.Store(new([]*[chunkLen]iconn))
}

// at returns the iconn of id, which get has handed out.
func (s *slab) at(id uint32) *iconn {
	return &(*s.chunks.Load())[id>>chunkShift][id&chunkMask]
}

// get returns a free iconn: recycled, with c.Owner and c.Scratch set.
func (s *slab) get() *iconn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 0 {
		ic := s.at(s.free - 1)
		s.free, ic.next = ic.next, 0
		ic.c.Scratch = uintptr(ic.id)
		return ic
	}
	id := s.used
	if cs := *s.chunks.Load(); int(id>>chunkShift) == len(cs) {
		ch := new([chunkLen]iconn)
		for i := range ch {
			ch[i].id = id + uint32(i)
			ch[i].c.Owner = s.owner
		}
		grown := append(cs[:len(cs):len(cs)], ch) // a copy: loops may be reading cs
		s.chunks.Store(&grown)                    // ids < used+chunkLen resolvable from here
	}
	s.used++
	ic := s.at(id)
	ic.c.Scratch = uintptr(id)
	return ic
}

// put returns ic to the free list. ic must be recycled and unlinked.
func (s *slab) put(ic *iconn) {
	s.mu.Lock()
	ic.next, s.free = s.free, ic.id+1
	s.mu.Unlock()
}

// list is a loop's doubly linked list of connections through iconn.prev and
// next, in insertion order. Owned by the loop.
type list struct {
	head, tail uint32 // id+1; 0: empty
	n          int
}

func (s *slab) pushBack(l *list, ic *iconn) {
	ic.prev, ic.next = l.tail, 0
	if l.tail != 0 {
		s.at(l.tail - 1).next = ic.id + 1
	} else {
		l.head = ic.id + 1
	}
	l.tail = ic.id + 1
	l.n++
}

func (s *slab) remove(l *list, ic *iconn) {
	if ic.prev != 0 {
		s.at(ic.prev - 1).next = ic.next
	} else {
		l.head = ic.next
	}
	if ic.next != 0 {
		s.at(ic.next - 1).prev = ic.prev
	} else {
		l.tail = ic.prev
	}
	ic.prev, ic.next = 0, 0
	l.n--
}

// front returns the first connection of l, or nil.
func (s *slab) front(l *list) *iconn {
	if l.head == 0 {
		return nil
	}
	return s.at(l.head - 1)
}
