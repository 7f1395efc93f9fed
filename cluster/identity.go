package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hongbao-io/hongbao/envelope"
	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/proto"
)

// Every message a gateway sends is on a subject that names it,
//
//	<prefix>.gw.<node>.beat          its heartbeat
//	<prefix>.gw.<node>.ev.<to>       a batch of events for gateway <to>
//	<prefix>.gw.<node>.ask.<name>    a request or broadcast to every gateway (stats, campaign)
//	<prefix>.gw.<node>.answer.<to>   its answer to a request of gateway <to>
//
// and its NATS user may publish under its own <prefix>.gw.<node>.> only
// (deploy/nats/nats-server.conf): the subject a message arrives on says who
// sent it, and a receiver drops (and counts) whatever claims otherwise. No
// inbox is used, so no gateway needs the right to publish on _INBOX.>.
const (
	subBeat   = "beat"
	subEvents = "ev"
	subAsk    = "ask"
	subAnswer = "answer"
)

// own is the subject this gateway sends what on.
func (n *Node) own(what string) string {
	return n.o.Subject + ".gw." + strconv.Itoa(n.o.Node) + "." + what
}

// anyGateway is the subject that every gateway sends what on.
func (n *Node) anyGateway(what string) string { return n.o.Subject + ".gw.*." + what }

// sender returns the node that subject names as its sender.
func (n *Node) sender(subject string) (int, bool) {
	rest, ok := strings.CutPrefix(subject, n.o.Subject)
	if !ok {
		return 0, false
	}
	if rest, ok = strings.CutPrefix(rest, ".gw."); !ok {
		return 0, false
	}
	tok, _, _ := strings.Cut(rest, ".")
	node, err := strconv.Atoi(tok)
	if err != nil || node < 0 || strconv.Itoa(node) != tok {
		return 0, false
	}
	return node, true
}

// peerSender returns the gateway that subject names as its sender when it
// is another gateway of this cluster's shape.
func (n *Node) peerSender(subject string) (int, bool) {
	node, ok := n.sender(subject)
	return node, ok && node < n.o.Nodes && node != n.o.Node
}

// Permissions are what the NATS user of gateway node needs, under subject
// prefix: publish on its own subjects only; subscribe to every heartbeat
// and request, and to the events and answers sent to it. An operator's
// nats-server configuration gives each gateway these (deploy/nats).
func Permissions(prefix string, node int) (publish, subscribe []string) {
	gw, me := prefix+".gw.", strconv.Itoa(node)
	return []string{gw + me + ".>"},
		[]string{gw + "*." + subBeat, gw + "*." + subAsk + ".>", gw + "*." + subEvents + "." + me, gw + "*." + subAnswer + "." + me}
}

// JetStreamPermissions are what the NATS user of gateway node, of a cluster
// of nodes gateway numbers, needs under -journal jetstream: Permissions,
// and for its journal connection what it does in the journal's stream
// <prefix>_journal and the snapshot buckets <prefix>_snapshots_<node> (see
// jsjournal.Layout), with the API's answers on this gateway's own inboxes
// (InboxPrefix) only:
//
//   - append its rounds and claims of any SET on its own subjects only
//     (<prefix>.j.<set>.<node>.…), so that NATS proves who wrote each;
//   - put and delete snapshot objects in its own bucket only, the purge of
//     their chunks included;
//   - read the stream and every bucket: their configuration (to check it,
//     never to change it: no STREAM.CREATE, UPDATE, DELETE or PURGE), a
//     SET's last or next message (STREAM.MSG.GET), ordered consumers,
//     created and deleted, pulled from on the journal and pushed to an inbox
//     on the buckets, whose flow control is answered on $JS.FC (in the NATS
//     server's v1 and v2 forms).
//
// No $JS.ACK: every consumer is ordered and acknowledges nothing. An
// operator's identity (OperatorPermissions) provisions the stream and the
// buckets. Every gateway may read every SET's journal, as any may take any
// SET over (docs/CLUSTER.md, Identities).
func JetStreamPermissions(prefix string, node, nodes int) (publish, subscribe []string) {
	publish, subscribe = Permissions(prefix, node)
	me := strconv.Itoa(node)
	journal, api := prefix+"_journal", "$JS.API."
	publish = append(publish,
		prefix+".j.*."+me+".*", // <set>.<node>.<r0|r1|r2|c>
		"$O."+prefix+"_snapshots_"+me+".>",
		api+"INFO",
		api+"STREAM.INFO."+journal,
		api+"STREAM.MSG.GET."+journal,
		api+"CONSUMER.CREATE."+journal+".>", // <stream>.<consumer>[.<filter>]
		api+"CONSUMER.DELETE."+journal+".*",
		api+"CONSUMER.MSG.NEXT."+journal+".*",
		api+"STREAM.PURGE.OBJ_"+prefix+"_snapshots_"+me,
	)
	for n := range nodes {
		b := "OBJ_" + prefix + "_snapshots_" + strconv.Itoa(n)
		publish = append(publish,
			api+"STREAM.INFO."+b,
			api+"CONSUMER.CREATE."+b+".>",
			api+"CONSUMER.DELETE."+b+".*",
			api+"DIRECT.GET."+b+".>", // <stream>.<subject>: an object's meta
			"$JS.FC."+b+".>", "$JS.FC.*.*."+b+".>")
	}
	return publish, append(subscribe, InboxPrefix(prefix, node)+".>")
}

// OperatorPermissions are those of the operator's NATS user, which
// provisions a cluster's JetStream (jsjournal.Provision, jsadmin): the
// JetStream API, its answers on the usual inboxes, and no gateway's
// subjects.
func OperatorPermissions() (publish, subscribe []string) {
	return []string{"$JS.API.>"}, []string{"_INBOX.>"}
}

// Auth is how a gateway proves who it is to NATS. Any one of Creds, NKey or
// User (with Password) names its user; a client certificate (Cert, Key) can
// do so too, where the NATS server maps certificates to users. CA makes the
// connection TLS, verified against it.
type Auth struct {
	Creds    string // a .creds file: the user's JWT and nkey seed
	NKey     string // a file holding the user's nkey seed
	User     string
	Password string
	CA       string // PEM file of the CAs that sign the NATS servers' certificates
	Cert     string // PEM client certificate, for mutual TLS
	Key      string // its private key
}

// Identified reports whether a gives NATS an identity: without one, any
// client of the NATS server can speak as any gateway.
func (a Auth) Identified() bool { return a.Creds != "" || a.NKey != "" || a.User != "" || a.Cert != "" }

// options are the nats.go options that present a.
// Options are the NATS options that present a's identity, for a connection
// of the operator's tools.
func (a Auth) Options() ([]nats.Option, error) { return a.options() }

func (a Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case a.Creds != "":
		opts = append(opts, nats.UserCredentials(a.Creds))
	case a.NKey != "":
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("-nats-nkey %s: %w", a.NKey, err)
		}
		opts = append(opts, o)
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Cert != "" {
		opts = append(opts, nats.ClientCert(a.Cert, a.Key))
	}
	return opts, nil
}

// probeSubject is a subject of no gateway's: a gateway's NATS user that may
// publish on it may publish as any gateway.
func (n *Node) probeSubject() string { return n.o.Subject + ".gw.probe.probe" }

// checkPermissions confirms, once this gateway has subscribed, that NATS
// took its subscriptions and, where it has an identity, that it may not
// publish as another gateway: a user allowed to could forge any gateway's
// events and campaigns, and so could anyone holding its credentials.
func (n *Node) checkPermissions() error {
	if err := n.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("cluster: NATS did not answer: %w", err)
	}
	if err := n.nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Errorf("cluster: NATS refused this gateway's subscriptions (%v): its user needs to subscribe to %s, %s, %s and %s (deploy/nats/nats-server.conf)",
			err, n.anyGateway(subBeat), n.anyGateway(subEvents+"."+strconv.Itoa(n.o.Node)), n.anyGateway(subAsk+".>"), n.anyGateway(subAnswer+"."+strconv.Itoa(n.o.Node)))
	}
	if !n.o.Auth.Identified() {
		return nil
	}
	if err := n.nc.Publish(n.probeSubject(), nil); err != nil {
		return fmt.Errorf("cluster: NATS: %w", err)
	}
	if err := n.nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("cluster: NATS did not answer: %w", err)
	}
	if err := n.nc.LastError(); err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Errorf("cluster: this gateway's NATS user may publish on %s, a subject of no gateway's: it could speak as any gateway. "+
			"Allow it to publish on %s only (deploy/nats/nats-server.conf)", n.probeSubject(), n.own(">"))
	}
	return nil
}

// Kinds of messages a receiver drops because they did not come from the
// gateway they claim, or claim what their sender may not say.
const (
	ForgedBeat    = iota // a heartbeat naming another node than its subject
	ForgedEvent          // an event its sender's gateway could not have sent (a user, envelope or crossing of another gateway's)
	ForgedAsk            // a request or broadcast whose content names another sender
	ForgedAnswer         // an answer to no request of this gateway's, or from a gateway not asked
	ForgedSubject        // a message on a subject that names no other gateway of this cluster
	ForgedKinds
)

var forgedNames = [ForgedKinds]string{"heartbeat", "event", "request", "answer", "subject"}

// ForgedName names kind k for /metrics.
func ForgedName(k int) string { return forgedNames[k] }

// forgeries counts and logs what receivers dropped; the log says the first
// of each kind and then at most one line a kind every forgedLogEvery, with
// the count since.
type forgeries struct {
	n       [ForgedKinds]atomic.Uint64
	mu      sync.Mutex
	logged  [ForgedKinds]time.Time
	shushed [ForgedKinds]uint64
}

const forgedLogEvery = 10 * time.Second

func (f *forgeries) add(log *slog.Logger, kind, from int, why string) {
	f.n[kind].Add(1)
	f.mu.Lock()
	now := time.Now()
	if now.Sub(f.logged[kind]) < forgedLogEvery {
		f.shushed[kind]++
		f.mu.Unlock()
		return
	}
	f.logged[kind] = now
	more := f.shushed[kind]
	f.shushed[kind] = 0
	f.mu.Unlock()
	log.Warn("cluster: dropped a message that did not come from the gateway it claims, or that its gateway may not send",
		"kind", forgedNames[kind], "from", from, "why", why, "dropped_since_last_line", more)
}

// Forged returns how many messages of kind k receivers dropped.
func (n *Node) Forged(k int) uint64 { return n.forged.n[k].Load() }

// stale begins mayNotSend's answer for an event of a SET's former owner:
// dropped, but no forgery.
const stale = "stale"

// notOwner is "" when from runs set, stale when it ran it before its owner
// of the moment, why otherwise.
func (n *Node) notOwner(set, from int, why string) string {
	switch {
	case n.o.Owner(set) == from:
		return ""
	case n.o.Former != nil && n.o.Former(set) == from:
		return stale
	}
	return why
}

// mayNotSend says why gateway from could not have sent ev, "" when it
// could: a request or re-push is its own users' (the requester's
// SET is its), an ENVELOPE push its own envelope's, and every frame an event
// carries to be written to a client is of the kind the event says. An
// answer is checked against its crossing (crossings.takeAnswer).
func (n *Node) mayNotSend(from int, ev *event.Event) string {
	switch ev.Kind {
	case event.KOpen, event.KRepush:
		if why := n.notOwner(n.bus.SETOf(ev.User), from, "a "+ev.Kind.String()+" for a user of another gateway"); why != "" {
			return why
		}
		if ev.OutLen != 0 || ev.Buf != nil {
			return "a " + ev.Kind.String() + " carrying a frame"
		}
	case event.KChat:
		if why := n.notOwner(n.bus.SETOf(ev.User), from, "a chat from a user of another gateway"); why != "" {
			return why
		}
		if ev.Buf == nil || !isChatDeliver(ev.Buf.B, ev.User, ev.Stamp) || ev.OutLen != 0 {
			return "a chat whose frame is not its CHAT_DELIVER"
		}
	case event.KPush:
		if why := n.notOwner(envelope.OwnerSET(ev.Env), from, "an ENVELOPE push of another gateway's envelope"); why != "" {
			return why
		}
		if f, size, err := proto.NextResponse(ev.Frame()); err != nil || size != int(ev.OutLen) || f.Type != proto.Envelope ||
			ev.Buf != nil || ev.Status != 0 {
			return "a push whose frame is not an ENVELOPE"
		} else if env, _, _, _ := f.Envelope(); env != ev.Env {
			return "an ENVELOPE push of another envelope than its frame's"
		}
	case event.KAnswer:
		if ev.Buf != nil {
			return "an answer carrying more than its frame"
		}
	default:
		return "a " + ev.Kind.String() + " event, which gateways do not send one another"
	}
	return ""
}

// isChatDeliver reports whether b is exactly one CHAT_DELIVER frame from
// user with stamp.
func isChatDeliver(b []byte, user uint32, stamp uint64) bool {
	f, size, err := proto.NextResponse(b)
	if err != nil || size != len(b) || f.Type != proto.ChatDeliver || f.Stamp != stamp {
		return false
	}
	sender, _ := f.ChatDeliver()
	return sender == user
}
