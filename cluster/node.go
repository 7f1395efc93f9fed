package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/ring"
)

// Options configure a gateway's place in the cluster.
type Options struct {
	URL     string        // NATS server(s), comma-separated
	Node    int           // this gateway's number, 0..Nodes−1
	Name    string        // its name (where SETs fail over: in their ownership records)
	Nodes   int           // gateways in the cluster
	Sets    int           // SETs of the cluster, the same on every gateway
	Addr    string        // the client address other gateways send users to (LOGIN_ACK 3)
	Admin   string        // the admin address, for GET /cluster
	Timeout time.Duration // a crossing not answered by then is answered "unavailable"
	Ring    int           // slots of each link's ring
	Subject string        // the prefix of every subject: one NATS account can hold several clusters
	Auth    Auth          // this gateway's identity on NATS
	// Owners, where SETs fail over (the journal on JetStream), says which
	// node runs a SET now (-1: none); nil: the SETs s with s mod Nodes == I
	// are gateway I's for good.
	Owners func(set int) int
	// Former, with Owners, says which node ran a SET before its owner of
	// the moment (-1: none): its events for the SET, sent before it learnt
	// it lost it, are dropped as stale rather than as forged.
	Former func(set int) int
	// Lease is how long a gateway may go unheard before it counts as down
	// (0: four heartbeats): where SETs fail over, the others then take its
	// SETs.
	Lease  time.Duration
	Logger *slog.Logger
}

// DefaultTimeout is the bound on a crossing's answer.
const DefaultTimeout = time.Second

// Heartbeats: how often a gateway announces itself, and after how long
// without one a gateway counts as down.
const (
	beatEvery = 250 * time.Millisecond
	downAfter = 4 * beatEvery
	joinWait  = 3 * beatEvery
)

// Gateway is one gateway as its heartbeats announce it.
type Gateway struct {
	Node     int    `json:"node"`
	Nodes    int    `json:"nodes"`
	Sets     int    `json:"sets"`
	Addr     string `json:"addr"`
	Admin    string `json:"admin"`
	Instance uint64 `json:"instance"` // random per process: a restart is a new instance
	Version  string `json:"version,omitempty"`
	// Ready: it takes events (its SETs recovered, its subscription
	// confirmed). Only a ready gateway counts as up: crossings to one that
	// is not are answered at once.
	Ready bool `json:"ready,omitempty"`
	// Name, where SETs fail over: the name its SETs' records give it.
	Name string `json:"name,omitempty"`
	// Leaving: it hands its SETs to the others before it stops, and takes
	// none.
	Leaving bool `json:"leaving,omitempty"`
}

// Node is this gateway's membership of the cluster: its NATS connection,
// the gateways it has heard from, the links to the others, the crossings in
// flight.
type Node struct {
	o    Options
	log  *slog.Logger
	nc   *nats.Conn
	self Gateway

	mu    sync.Mutex
	peers map[int]peer       // gateways of this cluster's shape, by node
	odd   map[uint64]Gateway // gateways of another shape, or with this one's node number, by instance (at most maxOdd)
	// conflictNs: when another gateway last announced this one's node
	// number (Conflict), unix ns.
	conflictNs atomic.Int64
	// selfNs: when this gateway last heard its own heartbeat, unix ns: its
	// connection carries both ways (HearsItself).
	selfNs atomic.Int64
	// ignored: a node whose heartbeats are dropped as if they came late, in
	// tests (Ignore); -1 none.
	ignored atomic.Int32
	forged  forgeries

	askMu sync.Mutex
	asks  map[uint64]*asking // requests waiting for answers, by id
	askID uint64             // the last request's id, under askMu

	links []*link // per node; nil for this one
	cross *crossings
	bus   *event.Bus
	jn    *journal.Journal
	subs  []*nats.Subscription
	evSub *nats.Subscription // the events other gateways send this one
	// expiring: one expiry at a time (the sweeper's, Leave's, a move's).
	expiring sync.Mutex
	stop     chan struct{}
	wg       sync.WaitGroup

	M Metrics
}

type peer struct {
	Gateway
	seen time.Time
}

// maxOdd bounds the gateways of another shape remembered for the log: on a
// NATS server without credentials anyone can announce as many as it likes.
const maxOdd = 64

// up: ready and heard from within after.
func (p peer) up(after time.Duration) bool { return p.Ready && time.Since(p.seen) < after }

// downAfter is how long a gateway may go unheard before it counts as down.
func (o *Options) downAfter() time.Duration {
	if o.Lease > 0 {
		return o.Lease
	}
	return downAfter
}

// Metrics count the crossings, for /metrics.
type Metrics struct {
	Sent, Received       atomic.Uint64 // events
	Messages             atomic.Uint64 // NATS messages sent
	TimedOut, Late       atomic.Uint64 // crossings answered "unavailable"; answers that came after
	Stale                atomic.Uint64 // events from a SET's former owner, sent before it learnt it lost the SET
	Misrouted, Malformed atomic.Uint64 // events for a SET not run here; messages that did not decode
	PublishErrors        atomic.Uint64 // batches NATS refused (disconnected past its buffer)
	Refused              atomic.Uint64 // requests from other gateways answered "overloaded": their SET's ring was nearly full
	SlowConsumer         atomic.Uint64 // times NATS dropped messages for this gateway: it did not read them fast enough
}

// Validate checks o.
func (o *Options) Validate() error {
	switch {
	case o.Nodes < 1 || o.Node < 0 || o.Node >= o.Nodes:
		return fmt.Errorf("-node %d/%d: want I/N with 0 ≤ I < N", o.Node, o.Nodes)
	case o.Sets < o.Nodes:
		return fmt.Errorf("-sets %d: a cluster of %d gateways needs at least one SET each", o.Sets, o.Nodes)
	case o.Timeout <= 0:
		return fmt.Errorf("-cluster-timeout %v: want > 0", o.Timeout)
	}
	return nil
}

// Owner returns the node that runs set, -1 for none (a SET between owners).
func (o *Options) Owner(set int) int {
	if o.Owners != nil {
		return o.Owners(set)
	}
	return set % o.Nodes
}

// Join connects to NATS, listens to the cluster's heartbeats for a moment
// and refuses to join a cluster of another shape or one whose node number
// o.Node is taken; then it announces itself. The links are ready for
// set.Options.Remote; Start starts them once the SETs are built.
func Join(o Options, version string) (*Node, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Subject == "" {
		o.Subject = "hongbao"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n := &Node{o: o, log: o.Logger, peers: map[int]peer{}, odd: map[uint64]Gateway{}, cross: newCrossings(), stop: make(chan struct{}),
		asks: map[uint64]*asking{},
		self: Gateway{Node: o.Node, Nodes: o.Nodes, Sets: o.Sets, Addr: o.Addr, Admin: o.Admin, Instance: rand.Uint64(), Version: version, Name: o.Name}}
	n.ignored.Store(-1)
	auth, err := o.Auth.options()
	if err != nil {
		return nil, err
	}
	if !o.Auth.Identified() {
		n.log.Warn("cluster: NATS without credentials: any client of the NATS server can speak as any gateway — " +
			"forge the events that move money, start and cancel campaigns, answer for the cluster's stats, send users to an address of its choosing. " +
			"Give each gateway its own NATS user (-nats-creds, -nats-nkey or -nats-user; deploy/nats/nats-server.conf)")
	}
	nc, err := nats.Connect(o.URL, append(auth, nats.Name(fmt.Sprintf("hongbao gateway %d/%d", o.Node, o.Nodes)),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 0),
		nats.PingInterval(PingInterval(o.downAfter())), nats.MaxPingsOutstanding(MaxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				n.log.Warn("cluster: NATS connection lost: crossings answer unavailable until it is back", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { n.log.Info("cluster: NATS connection back", "url", c.ConnectedUrl()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				n.M.SlowConsumer.Add(1)
			}
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), n.probeSubject()) {
				return // checkPermissions' probe, refused as it should be
			}
			n.log.Error("cluster: NATS", "err", err)
		}))...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connecting to NATS at %s: %w", o.URL, err)
	}
	n.nc = nc
	for _, s := range []struct {
		subject string
		fn      nats.MsgHandler
	}{{n.anyGateway(subBeat), n.heard}, {n.anyGateway(subAnswer + "." + strconv.Itoa(o.Node)), n.answered}} {
		sub, err := nc.Subscribe(s.subject, s.fn)
		if err != nil {
			nc.Close()
			return nil, err
		}
		n.subs = append(n.subs, sub)
	}
	if err := n.beat(true); err != nil {
		nc.Close()
		return nil, err
	}
	time.Sleep(joinWait)
	if err := n.checkJoin(); err != nil {
		nc.Close()
		return nil, err
	}
	n.links = make([]*link, o.Nodes)
	for node := range o.Nodes {
		if node != o.Node {
			if n.links[node], err = newLink(n, node); err != nil {
				nc.Close()
				return nil, err
			}
		}
	}
	return n, nil
}

// beat announces this gateway; hello asks the others to answer at once.
func (n *Node) beat(hello bool) error {
	n.mu.Lock()
	self := n.self
	n.mu.Unlock()
	b, _ := json.Marshal(struct {
		Gateway
		Hello bool `json:"hello,omitempty"`
	}{self, hello})
	return n.nc.Publish(n.own(subBeat), b)
}

func (n *Node) heard(m *nats.Msg) {
	var g struct {
		Gateway
		Hello bool `json:"hello"`
	}
	from, ok := n.sender(m.Subject)
	if !ok {
		n.forged.add(n.log, ForgedSubject, -1, "a heartbeat on "+m.Subject)
		return
	}
	if json.Unmarshal(m.Data, &g) != nil || g.Node != from {
		n.forged.add(n.log, ForgedBeat, from, "a heartbeat on "+m.Subject+" that does not name that node")
		return
	}
	if why := badBeat(&g.Gateway); why != "" {
		n.forged.add(n.log, ForgedBeat, from, "a heartbeat on "+m.Subject+" with "+why)
		return
	}
	if g.Instance == n.self.Instance {
		n.selfNs.Store(time.Now().UnixNano())
		return
	}
	if n.Ignored(from) {
		return
	}
	if g.Nodes != n.o.Nodes || g.Sets != n.o.Sets { // kept apart: it must not take a node's place
		known := n.remember(g.Gateway)
		if !known {
			n.log.Error("cluster: a gateway of another shape is on the same subjects: ignored", "node", g.Node, "nodes", g.Nodes, "sets", g.Sets, "addr", g.Addr)
		}
		return
	}
	if g.Node == n.o.Node { // joined after this one passed its check, or this one came back from a stall
		known := n.remember(g.Gateway)
		n.conflictNs.Store(time.Now().UnixNano())
		if !known {
			n.log.Error("cluster: another gateway announces this one's node number: both would draw the same envelopes; stop one of them", "node", g.Node, "addr", g.Addr)
		}
		return
	}
	n.mu.Lock()
	n.peers[g.Node] = peer{g.Gateway, time.Now()}
	n.mu.Unlock()
	if g.Hello {
		n.beat(false)
	}
}

// badBeat says what in heartbeat g no gateway announces, "" if nothing:
// its addresses are sent to clients (LOGIN_ACK 3) and shown to operators.
func badBeat(g *Gateway) string {
	valid := func(addr string) bool {
		if addr == "" {
			return true
		}
		_, port, err := net.SplitHostPort(addr)
		return err == nil && port != ""
	}
	switch {
	case len(g.Addr) > proto.MaxRedirectAddr || !valid(g.Addr):
		return fmt.Sprintf("a client address of %d bytes that is no host:port", len(g.Addr))
	case len(g.Admin) > proto.MaxRedirectAddr || !valid(g.Admin):
		return fmt.Sprintf("an admin address of %d bytes that is no host:port", len(g.Admin))
	case len(g.Name) > maxName || len(g.Version) > maxName:
		return "a name or version longer than a name may be"
	case g.Nodes < 1 || g.Node >= g.Nodes || g.Sets < 1:
		return fmt.Sprintf("node %d of %d, %d SETs", g.Node, g.Nodes, g.Sets)
	}
	return ""
}

// maxName bounds a gateway's name (-name) and version in its heartbeats.
const maxName = 128

// remember keeps g among the gateways of another shape or of this one's
// node number, and reports whether it was known already.
func (n *Node) remember(g Gateway) (known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, known = n.odd[g.Instance]; !known && len(n.odd) < maxOdd {
		n.odd[g.Instance] = g
	}
	return known
}

func (n *Node) checkJoin() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.odd {
		if p.Nodes == n.o.Nodes && p.Sets == n.o.Sets {
			return fmt.Errorf("cluster: node %d is already served by the gateway at %s", p.Node, p.Addr)
		}
		return fmt.Errorf("cluster: gateway %d at %s runs -node %d/%d -sets %d; this one -node %d/%d -sets %d: every gateway needs the same N and -sets",
			p.Node, p.Addr, p.Node, p.Nodes, p.Sets, n.o.Node, n.o.Nodes, n.o.Sets)
	}
	return nil
}

// Remote returns the link that carries the events of set when another
// gateway runs it, nil when this one does: set.Options.Remote.
func (n *Node) Remote(set int) event.Transport {
	if owner := n.o.Owner(set); owner >= 0 {
		return n.Link(owner)
	}
	return nil
}

// Link returns the transport of the link to node, nil for this one: where
// the events of the SETs it runs go.
func (n *Node) Link(node int) event.Transport {
	if l := n.links[node]; l != nil {
		return l.ring
	}
	return nil
}

// Start starts the links, the receiver and the heartbeats, delivering what
// other gateways send into bus (the SETs must be built and started), with
// money answers gated on j (nil: journal off).
func (n *Node) Start(bus *event.Bus, j *journal.Journal) error {
	n.bus, n.jn = bus, j
	for _, l := range n.links {
		if l != nil {
			if err := l.ring.Start(); err != nil {
				return err
			}
		}
	}
	sub, err := n.nc.Subscribe(n.anyGateway(subEvents+"."+strconv.Itoa(n.o.Node)), n.receive)
	if err != nil {
		return err
	}
	sub.SetPendingLimits(-1, 256<<20) // a burst waits here rather than being dropped
	n.evSub = sub
	n.subs = append(n.subs, sub)
	// The server has the subscriptions before anyone hears of this gateway:
	// what the others send from then on is delivered.
	if err := n.checkPermissions(); err != nil {
		return err
	}
	n.mu.Lock()
	n.self.Ready = true
	n.mu.Unlock()
	n.beat(false)
	n.wg.Add(2)
	go n.heartbeats()
	go n.sweep()
	return nil
}

func (n *Node) heartbeats() {
	defer n.wg.Done()
	t := time.NewTicker(beatEvery)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.beat(false)
		}
	}
}

// Owns reports whether this gateway runs set.
func (n *Node) Owns(set int) bool { return n.o.Owner(set) == n.o.Node }

// OwnerAddr returns the client address of the gateway that runs set, ""
// when it is not up (not heard from lately, or not ready yet): the client
// retries later rather than connect to a gateway that is gone.
func (n *Node) OwnerAddr(set int) string {
	owner := n.o.Owner(set)
	if owner < 0 {
		return "" // between owners: the client retries
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if owner == n.o.Node {
		return n.o.Addr
	}
	if p, ok := n.peers[owner]; ok && p.up(n.o.downAfter()) {
		return p.Addr
	}
	return ""
}

// Conflict reports whether another gateway has announced this one's node
// number lately (within the time a gateway counts as up): a configuration
// error that /healthz reports while it lasts.
func (n *Node) Conflict() bool {
	at := n.conflictNs.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < n.o.downAfter()
}

// GatewayStatus is one gateway in GET /cluster.
type GatewayStatus struct {
	Node      int     `json:"node"`
	Name      string  `json:"name,omitempty"`
	Leaving   bool    `json:"leaving,omitempty"`
	Addr      string  `json:"addr"`
	Admin     string  `json:"admin"`
	Sets      []int   `json:"sets"`
	Up        bool    `json:"up"`
	Self      bool    `json:"self,omitempty"`
	LastSeenS float64 `json:"last_seen_s"` // seconds since its last heartbeat; 0 for this one
}

// Map is GET /cluster.
type Map struct {
	Node     int             `json:"node"`
	Nodes    int             `json:"nodes"`
	Sets     int             `json:"sets"`
	NATS     bool            `json:"nats_connected"`
	Timeout  float64         `json:"crossing_timeout_s"`
	InFlight int             `json:"crossings_in_flight"`
	Gateways []GatewayStatus `json:"gateways"`
}

// Map returns the cluster as this gateway sees it.
func (n *Node) Map() Map {
	m := Map{Node: n.o.Node, Nodes: n.o.Nodes, Sets: n.o.Sets, NATS: n.nc.IsConnected(), Timeout: n.o.Timeout.Seconds(),
		InFlight: n.cross.waiting()}
	now := time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for node := range n.o.Nodes {
		g := GatewayStatus{Node: node, Sets: []int{}}
		for s := range n.o.Sets {
			if n.o.Owner(s) == node {
				g.Sets = append(g.Sets, s)
			}
		}
		if node == n.o.Node {
			g.Addr, g.Admin, g.Up, g.Self, g.Name, g.Leaving = n.o.Addr, n.o.Admin, true, true, n.self.Name, n.self.Leaving
		} else if p, ok := n.peers[node]; ok {
			age := now.Sub(p.seen)
			g.Addr, g.Admin, g.Up, g.LastSeenS, g.Name, g.Leaving = p.Addr, p.Admin, p.Ready && age < n.o.downAfter(), age.Seconds(), p.Name, p.Leaving
		}
		m.Gateways = append(m.Gateways, g)
	}
	return m
}

// up reports whether node has been heard from lately and is ready (this
// one is).
func (n *Node) up(node int) bool { return n.heardAs(node, true) }

// isHeard reports whether node has been heard from within the lease, ready
// or not (this one is).
func (n *Node) isHeard(node int) bool { return n.heardAs(node, false) }

// heardAs reports whether node has been heard from within the lease, and,
// with ready, is ready.
func (n *Node) heardAs(node int, ready bool) bool {
	if node == n.o.Node {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.peers[node]
	return ok && time.Since(p.seen) < n.o.downAfter() && (p.Ready || !ready)
}

// Leave prepares a gateway that is shutting down, its clients gone, to
// close: it waits (until deadline at most) for the answers to its
// crossings, answers those still waiting "unavailable", then stops taking
// events from the other gateways (their crossings to this one time out
// there) and waits for what NATS already delivered to be published, so
// that the rings can settle.
func (n *Node) Leave(deadline time.Time) {
	n.mu.Lock()
	n.self.Ready = false // the others answer their crossings to this one at once
	n.mu.Unlock()
	n.beat(false)
	wait := time.Now().Add(n.o.Timeout)
	if deadline.Before(wait) {
		wait = deadline
	}
	for n.cross.waiting() > 0 && time.Now().Before(wait) {
		time.Sleep(time.Millisecond)
	}
	n.expire(math.MaxInt64, nil)
	if n.evSub == nil {
		return
	}
	n.evSub.Drain()
	for n.evSub.IsValid() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// Close stops the links (their rings drain into NATS), the sweeper and the
// heartbeats, and closes the NATS connection after a flush.
func (n *Node) Close() error {
	select {
	case <-n.stop:
		return nil
	default:
	}
	close(n.stop)
	n.wg.Wait()
	var first error
	for _, l := range n.links {
		if l != nil && l.ring != nil {
			if err := l.ring.Close(); err != nil && !errors.Is(err, ring.ErrClosed) && first == nil {
				first = err
			}
		}
	}
	for _, s := range n.subs {
		s.Unsubscribe()
	}
	n.nc.FlushTimeout(time.Second)
	n.nc.Close()
	return first
}

// Peers returns the nodes heard from lately, ascending, this one included.
func (n *Node) Peers() []int {
	var out []int
	for node := range n.o.Nodes {
		if n.up(node) {
			out = append(out, node)
		}
	}
	return slices.Clip(out)
}

// Heard returns the nodes heard from within the lease, ready or not (still
// starting, or leaving), this one included: where SETs fail over, the
// gateways that keep theirs.
func (n *Node) Heard() []int {
	return n.heardNodes(true, func(peer) bool { return true })
}

// heardNodes returns, ascending, the nodes heard from within the lease for
// which keep is true, and this one if self.
func (n *Node) heardNodes(self bool, keep func(peer) bool) []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []int
	if self {
		out = append(out, n.o.Node)
	}
	for node, p := range n.peers {
		if node != n.o.Node && time.Since(p.seen) < n.o.downAfter() && keep(p) {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// departedFor is how long a gateway that left on purpose counts as
// departed: the hour over which HongbaoGatewayMissing remembers the
// gateways it heard.
const departedFor = time.Hour

// Departed returns how many gateways are unheard whose last heartbeat said
// they were leaving (a drain, a SIGTERM handing its SETs over), within
// departedFor: planned departures, not failures.
func (n *Node) Departed() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	count := 0
	for node, p := range n.peers {
		if age := time.Since(p.seen); node != n.o.Node && p.Leaving && age >= n.o.downAfter() && age < departedFor {
			count++
		}
	}
	return count
}

// SetLeaving announces that this gateway hands its SETs over and takes no
// more (or, false, that it takes them again).
func (n *Node) SetLeaving(on bool) {
	n.mu.Lock()
	n.self.Leaving = on
	n.mu.Unlock()
	n.beat(false)
}

// Takers returns the gateways heard within the lease that take SETs (not
// leaving), ascending, this one included unless it is leaving.
func (n *Node) Takers() []int {
	n.mu.Lock()
	self := !n.self.Leaving
	n.mu.Unlock()
	return n.heardNodes(self, func(p peer) bool { return p.Ready && !p.Leaving })
}

// NameOf returns the name gateway node announced ("" if unheard).
func (n *Node) NameOf(node int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if node == n.o.Node {
		return n.self.Name
	}
	return n.peers[node].Name
}

// NodeNamed returns the node of the gateway heard lately under name (this
// one's included), false if none.
func (n *Node) NodeNamed(name string) (int, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.self.Name == name {
		return n.o.Node, true
	}
	for node, p := range n.peers {
		if p.Name == name && time.Since(p.seen) < n.o.downAfter() {
			return node, true
		}
	}
	return -1, false
}

// HearsItself reports whether this gateway heard its own heartbeat within
// d: its NATS connection carries, both ways. A gateway that does not hears
// no other either, and every other gateway only seems gone.
func (n *Node) HearsItself(d time.Duration) bool {
	at := n.selfNs.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

// Ignore makes this gateway drop node's heartbeats from now on, as if
// they came late (-1: none): tests use it for a gateway heard by none but
// itself.
func (n *Node) Ignore(node int) { n.ignored.Store(int32(node)) }

// Ignored reports whether node's heartbeats are dropped (Ignore).
func (n *Node) Ignored(node int) bool { return n.ignored.Load() == int32(node) }

// Instance is this process's instance number, in its heartbeats.
func (n *Node) Instance() uint64 { return n.self.Instance }

// BeatEvery is how often a gateway announces itself.
const BeatEvery = beatEvery

// PingInterval is how often a gateway's NATS connections ping their server
// where a gateway unheard for lease counts as gone: MaxPingsOut of them
// unanswered, and the connection is taken for dead and dialled again within
// about a lease — nats.go's default, 2 minutes, would leave a silent
// connection (its peer gone, its packets dropped) unnoticed for minutes.
// Not faster: a connection busy with a snapshot's megabytes on a loaded
// machine answers pings late, and one dropped for it fails what was in
// flight.
func PingInterval(lease time.Duration) time.Duration { return max(lease/4, 100*time.Millisecond) }

// MaxPingsOut is how many pings may go unanswered (PingInterval).
const MaxPingsOut = 3

// Shares is how many SETs each gateway runs: by the rule (s mod N), or
// where SETs fail over by their claims of the moment.
func (n *Node) Shares() []int {
	sh := make([]int, n.o.Nodes)
	for set := range n.o.Sets {
		if o := n.o.Owner(set); o >= 0 {
			sh[o]++
		}
	}
	return sh
}

// Options returns the node's options.
func (n *Node) Options() Options { return n.o }

// SetAddrs sets the client and admin addresses this gateway announces, once
// its listeners are bound; call it before Start.
func (n *Node) SetAddrs(client, admin string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.o.Addr, n.o.Admin = client, admin
	n.self.Addr, n.self.Admin = client, admin
}
