package event

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"
)

// Transport carries one SET's events from its producers through its stages
// in order: the SET's *Ring (the default), or an adapter of package transport
// (go-disruptor, channels) kept for comparison. *Ring satisfies it as it is.
// A sequence is the transport's own: use it only for At and Publish on the
// transport that returned it. Every method but Start is safe for concurrent
// use by any number of producers.
type Transport interface {
	Size() int                                             // slots
	Claim(n int) (hi int64, err error)                     // waits for room; ring.ErrClosed once closing
	TryClaim(n int) (hi int64, err error)                  // ring.ErrFull at once when there is no room
	TryClaimLeaving(n, keepFree int) (hi int64, err error) // also ring.ErrFull unless keepFree slots stay free
	At(seq int64) *Event                                   // the claimed slot to fill
	Publish(lo, hi int64)                                  // hands the claimed, filled slots to the first stage
	Start() error                                          // starts the stages
	Close() error                                          // refuses claims, drains every claimed event through every stage
	Err() error                                            // the stage failure (panic) that stopped it, or nil
	Len() int                                              // events claimed and not yet finished by the last stage
}

var _ Transport = (*Ring)(nil)

// Bus is the set of every SET's transport (ring), and the routing rules
// between them. Safe for concurrent use: every transport is multi-producer.
//
// In a cluster the Bus spans every SET of the cluster: a SET this gateway
// does not run has, as its transport, the link to the gateway that does
// (package cluster), which carries the events published into it there.
// Where SETs move between gateways, Route changes a SET's transport while
// producers publish: each claim reads the route once, so an event goes
// whole to the transport it was claimed on.
type Bus struct {
	routes   []atomic.Pointer[route]
	headroom int                   // slots a request must leave free (see PublishRequest)
	held     []atomic.Bool         // per SET: a stage of it holds events back (Outbox)
	local    atomic.Pointer[[]int] // the SETs run here, ascending; replaced whole by Route
	routeMu  sync.Mutex            // serializes Route's relist: a lost update would drop a SET from Local

	// strays counts the answers to this gateway's connections of a SET
	// that runs elsewhere now, dropped (Strays).
	strays atomic.Uint64
	// door holds the Door flags: what the ingress reads once per request.
	door atomic.Uint32

	// A view of RunningBus: its parent's routes, each fused ring wrapped
	// for one producer; views[set] caches the wrapper of the route it was
	// made for.
	parent *Bus
	mark   func(set int)
	views  []view
}

// route is where a SET's events go.
type route struct {
	t      Transport
	remote bool // a link to the gateway that runs the SET
	// leaving: the SET is being handed to another gateway. Its transport
	// still takes answers and the events of other SETs while it drains,
	// but no new request: it is not Local, nor IsLocal.
	leaving bool
}

// NewBus wraps the SETs' rings (or other transports). A request is refused
// while fewer than headroom slots of its ring would stay free, keeping that
// room for answers; headroom equal to the ring size refuses every request.
func NewBus[R Transport](rings []R, headroom int) *Bus {
	b := &Bus{routes: make([]atomic.Pointer[route], len(rings)), headroom: headroom, held: make([]atomic.Bool, len(rings))}
	local := make([]int, len(rings))
	for i, r := range rings {
		if headroom < 0 || headroom > r.Size() {
			panic("BUG: event: headroom outside 0..ring size")
		}
		b.routes[i].Store(&route{t: r})
		local[i] = i
	}
	b.local.Store(&local)
	return b
}

// SetRemote makes the SETs for which remote returns a transport run
// elsewhere: their events go to that transport (a link to the gateway that
// runs them), which may serve several SETs. Call it before anything is
// published.
func (b *Bus) SetRemote(remote func(set int) Transport) {
	for set := range b.routes {
		if t := remote(set); t != nil {
			b.routes[set].Store(&route{t: t, remote: true})
		}
	}
	b.relist()
}

// Route makes set's events go to t from now on: a transport run here, or
// (remote) a link to the gateway that runs the SET. What was claimed on the
// transport before still goes there; the old transport is its owner's to
// drain and close.
func (b *Bus) Route(set int, t Transport, remote bool) {
	if remote && t == nil {
		panic("BUG: event: a remote route without a transport")
	}
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	b.routes[set].Store(&route{t: t, remote: remote})
	b.relist()
}

// SetLeaving marks set as being handed to another gateway: from now on a
// request for it is refused (ClaimRequest fails, and its producers answer
// "overloaded"), it is neither Local — campaigns deal around it — nor
// IsLocal — logins for it are redirected, events from other gateways not
// taken — while answers, its connections' events and other SETs' events
// still reach its transport, which then drains. A later Route ends it.
func (b *Bus) SetLeaving(set int) {
	b.routeMu.Lock()
	defer b.routeMu.Unlock()
	r := *b.routes[set].Load()
	r.leaving = true
	b.routes[set].Store(&r)
	b.relist()
}

// stray drops ev, sent through o, if it is an answer to a connection here
// of set, which runs elsewhere now, and reports whether it did: the
// connection went with the SET (ERROR 9). What the answer told stays told
// or untold as for any connection gone: an OPEN's share is its opener's,
// and a repeated OPEN at the SET's new owner tells it.
func (b *Bus) stray(set int, ev *Event) bool {
	if ev.Kind != KAnswer || ev.Conn.C == nil {
		return false
	}
	root := b.root()
	if !root.routes[set].Load().remote {
		return false
	}
	if ev.Buf != nil {
		bytebufferpool.Put(ev.Buf)
		ev.Buf = nil
	}
	root.strays.Add(1)
	return true
}

// Strays is how many answers to connections of SETs that had moved away
// were dropped.
func (b *Bus) Strays() uint64 { return b.root().strays.Load() }

// The Door flags: a request is refused at the door while one is set.
const (
	// DoorFenced: this gateway cannot show that it still owns its SETs
	// (SetFenced).
	DoorFenced uint32 = 1 << iota
	// DoorStalled: its journal cannot make money durable now (SetStalled).
	DoorStalled
)

// Door returns the Door flags set now: one load for the ingress's every
// request, 0 while it serves as usual.
func (b *Bus) Door() uint32 { return b.root().door.Load() }

// setDoor sets (on) or clears flag.
func (b *Bus) setDoor(flag uint32, on bool) {
	if on {
		b.root().door.Or(flag)
	} else {
		b.root().door.And(^flag)
	}
}

// SetFenced marks every SET run here as possibly lost (on) or not (off):
// a gateway cut off from NATS may no longer own them, so it takes no
// request and no login for them — its producers send a requester to
// another gateway (ERROR 9) and answer a login LOGIN_ACK 3 with no address —
// while the connections that ask for nothing stay.
func (b *Bus) SetFenced(on bool) { b.setDoor(DoorFenced, on) }

// Fenced reports whether the SETs run here are fenced (SetFenced).
func (b *Bus) Fenced() bool { return b.Door()&DoorFenced != 0 }

// SetStalled marks every SET run here as unable to make money durable for
// now (on) or able again (off): its journal waits for its store. A request
// that moves money — SHAKE, OPEN, SEND — is then answered "overloaded"
// (retry) at the door rather than left waiting behind the stall; the rest
// is served.
func (b *Bus) SetStalled(on bool) { b.setDoor(DoorStalled, on) }

// Stalled reports whether money requests are refused for a stall
// (SetStalled).
func (b *Bus) Stalled() bool { return b.Door()&DoorStalled != 0 }

// Leaving reports whether set is being handed to another gateway.
func (b *Bus) Leaving(set int) bool { return b.root().routes[set].Load().leaving }

// relist makes Local the SETs whose route is local.
func (b *Bus) relist() {
	var local []int
	for set := range b.routes {
		if r := b.routes[set].Load(); !r.remote && !r.leaving {
			local = append(local, set)
		}
	}
	b.local.Store(&local)
}

// Local returns the SETs run here, ascending: every SET outside a cluster.
// The caller must not change it; Route replaces it rather than change it.
func (b *Bus) Local() []int {
	if b.parent != nil {
		return b.parent.Local()
	}
	return *b.local.Load()
}

// IsLocal reports whether set runs here (and is not leaving).
func (b *Bus) IsLocal(set int) bool {
	r := b.root().routes[set].Load()
	return !r.remote && !r.leaving
}

// root is the bus a view was made of, or b.
func (b *Bus) root() *Bus {
	if b.parent != nil {
		return b.parent
	}
	return b
}

// ring is set's transport as this bus publishes into it: a view's wrapper
// of a fused ring.
func (b *Bus) ring(set int) Transport {
	if b.parent == nil {
		return b.routes[set].Load().t
	}
	return b.viewOf(set)
}

// Sets is the number of SETs.
func (b *Bus) Sets() int { return len(b.root().routes) }

// Ring returns SET set's ring (its transport) as this bus publishes into it.
func (b *Bus) Ring(set int) Transport { return b.ring(set) }

// SETOf returns the SET that owns user: everything about a user lives there.
func (b *Bus) SETOf(user uint32) int { return int(user % uint32(len(b.root().routes))) }

// Slot is a claimed, unpublished slot of one SET's ring.
type Slot struct {
	ring Transport
	seq  int64
}

// Event is the slot to fill.
func (s Slot) Event() *Event { return s.ring.At(s.seq) }

// Publish hands the filled slot to the SET's stages.
func (s Slot) Publish() { s.ring.Publish(s.seq, s.seq) }

// ClaimRequest claims a slot for a new request in set's ring, failing (false)
// when the ring is nearly full: the caller answers "overloaded" instead.
func (b *Bus) ClaimRequest(set int) (Slot, bool) {
	if b.root().routes[set].Load().leaving {
		return Slot{}, false
	}
	r := b.ring(set)
	seq, err := r.TryClaimLeaving(1, b.headroom)
	if err != nil {
		return Slot{}, false
	}
	return Slot{r, seq}, true
}

// ClaimAnswer claims a slot in set's ring for an answer or other event that
// must not be refused for overload; it fails only when the ring is full.
func (b *Bus) ClaimAnswer(set int) (Slot, bool) {
	r := b.ring(set)
	seq, err := r.TryClaim(1)
	if err != nil {
		return Slot{}, false
	}
	return Slot{r, seq}, true
}

// MarkHeld records that a stage of set holds events back; the ticker then
// sends set a KTick so the stage retries even if no other event comes.
func (b *Bus) MarkHeld(set int) { b.root().held[set].Store(true) }

// Tick sends a KTick to every SET marked held and clears the marks. A SET
// whose ring is full is left marked: it is busy and will retry by itself.
func (b *Bus) Tick() {
	b = b.root()
	for set := range b.held {
		if !b.held[set].Load() || !b.held[set].CompareAndSwap(true, false) {
			continue
		}
		s, ok := b.ClaimAnswer(set)
		if !ok {
			b.held[set].Store(true)
			continue
		}
		*s.Event() = Event{Kind: KTick}
		s.Publish()
	}
}

// Settle waits, until the deadline, for every ring to be empty with no stage
// holding events back, in three scans a millisecond apart (an event one SET
// sends another while a scan passes shows in the next). Close drains each
// ring, but a ring closed before another refuses what that one still sends
// it, such as a share an egress gives back at shutdown; Settle first lets
// such traffic land. Call it once the ticker has stopped: it ticks the SETs
// whose stages hold events itself. It reports whether the rings settled.
func (b *Bus) Settle(deadline time.Time) bool {
	b = b.root()
	for quiet := 0; quiet < 3; {
		b.Tick()
		busy := false
		for _, set := range b.Local() {
			if b.ring(set).Len() > 0 || b.held[set].Load() {
				busy = true
				break
			}
		}
		if busy {
			quiet = 0
		} else {
			quiet++
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Close closes every ring run here, letting each drain, and returns the
// first error. The links to other gateways are their owner's to close.
func (b *Bus) Close() error {
	b = b.root()
	var first error
	for _, set := range b.Local() {
		if err := b.ring(set).Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
