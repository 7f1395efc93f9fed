package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/stages"
)

// Options configures a Server. Fill leaves set fields alone and gives every
// unset one its default; Validate reports every problem, each naming its flag.
type Options struct {
	Listen          string        // -listen: comma-separated TCP addresses for clients
	Admin           string        // -admin: address of the admin HTTP API
	AdminToken      string        // -admin-token
	Sets            int           // -sets
	Ring            int           // -ring: slots per SET ring, a power of two
	Loops           int           // -loops
	Ingress         string        // -ingress: epoll | netpoll
	Wait            string        // -wait: park | yield | spin
	Spins, Yields   int           // -spins, -yields: rounds before a waiting stage yields, parks (0: default, ring's for Spins; -1: none)
	Stages          string        // -stages: pipelined | fused
	Handoff         bool          // -handoff: the epoll loops never run a fused SET's stages themselves
	LoopWait        string        // -loop-wait: syscall | netpoller
	Pipeline        string        // -pipeline: ring | disruptor | chan | none
	Egress          string        // -egress: batch | frame
	MaxConns        int           // -max-conns
	LoginTimeout    time.Duration // -login-timeout
	MaxPending      int           // -max-pending: bytes
	ShedDelay       time.Duration // -shed-delay: 0 default, negative never
	AuthSecret      string        // -auth-secret (or -auth-secret-file, $HONGBAO_AUTH_SECRET)
	AuthSecretFile  string        // -auth-secret-file
	ReusePort       bool          // -reuseport
	MaxShares       int           // -max-shares
	MaxTotal        int           // -max-total: fen
	EnvelopeTTL     time.Duration // -envelope-ttl
	OpenedRetention time.Duration // -opened-retention
	RequestWindow   time.Duration // -request-window
	ShutdownTimeout time.Duration // -shutdown-timeout
	LogFormat       string        // -log-format: text | json
	LogLevel        string        // -log-level: debug | info | warn | error
	AdminTokenFile  string        // -admin-token-file
	ReadToken       string        // -read-token (or -read-token-file, $HONGBAO_READ_TOKEN)
	ReadTokenFile   string        // -read-token-file
	AdminTLSCert    string        // -admin-tls-cert: the admin API's certificate (PEM); "" plain HTTP
	AdminTLSKey     string        // -admin-tls-key: its private key
	AdminTLSCA      string        // -admin-tls-client-ca: CAs a client certificate must chain to; "" none asked
	MaxCampaigns    int           // -max-campaigns: running at once
	MaxPool         int           // -max-pool: shake envelopes in all pools
	SendRate        float64       // -send-rate: SENDs a second per user
	SendBurst       int           // -send-burst
	ChatRate        float64       // -chat-rate: CHATs a second per connection
	ChatBurst       int           // -chat-burst
	MaxLivePerUser  int           // -max-live-per-user
	MaxEnvelopes    int           // -max-envelopes: live group envelopes, server-wide (SENDs answer 3, send campaigns wait)
	Data            string        // -data: the directory of the journal and the snapshots
	Journal         string        // -journal: on | jetstream | off
	Name            string        // -name: this gateway's name; "" gw<node>
	Replicas        int           // -replicas: copies of the JetStream journal and records
	Lease           time.Duration // -lease: a gateway not heard from for this long loses its SETs
	Rebalance       time.Duration // -rebalance: least time between two SETs handed over to even out the cluster; 0: DefaultRebalance, negative: never by itself
	NoStandby       bool          // -standby=false: follow no SET run elsewhere (a takeover loads it from JetStream)
	SnapshotEvery   time.Duration // -snapshot-every: 0 only at shutdown
	JournalRound    time.Duration // -journal-round: least time between the starts of two journal rounds; 0: journal.DefaultRoundEvery, negative: none
	JournalRepair   bool          // -journal-repair: a start on a damaged journal cuts it (keeping the cut bytes beside it) instead of refusing
	NATS            string        // -nats: the NATS URL of a cluster; "" one server alone
	NATSCreds       string        // -nats-creds: this gateway's .creds file
	NATSNKey        string        // -nats-nkey: a file with this gateway's nkey seed
	NATSUser        string        // -nats-user (its password: -nats-password-file or $HONGBAO_NATS_PASSWORD)
	NATSPassFile    string        // -nats-password-file
	NATSCA          string        // -nats-ca: CAs of the NATS servers' certificates (TLS)
	NATSCert        string        // -nats-cert: client certificate (mutual TLS)
	NATSKey         string        // -nats-key: its private key
	Node            string        // -node I/N: this gateway's number and the cluster's gateways
	Advertise       string        // -advertise: the client address other gateways send users to
	coreNATS        string        // tests only: the crossings' NATS URL, when it differs from -nats (a proxy that can cut it alone)
	ClusterTimeout  time.Duration // -cluster-timeout: bound on a crossing's answer
	TraceSlow       time.Duration // -trace-slow: an answer slower than this has the runtime trace around it written; 0 never
	TraceDir        string        // -trace-dir: where; "" <Data>/traces
	// JournalCreate, when set, opens the journal's segment files instead of
	// the file system: tests inject write and sync failures with it.
	JournalCreate func(path string) (journal.File, error)
	// JetStreamAckWait, when set, bounds the wait for a journal round's
	// acknowledgement on JetStream (jsjournal.DefaultAckWait): tests of an
	// unavailable JetStream shorten it.
	JetStreamAckWait time.Duration
}

// Defaults, each with its reason.
const (
	DefaultListen  = "127.0.0.1:9000"
	DefaultAdmin   = "127.0.0.1:6060"
	DefaultSets    = 32   // many more shards than cores, so one busy SET never serializes the whole load
	DefaultRing    = 2048 // per SET: 2048 × 128-byte events = 256 KiB, 8 MiB for 32 SETs
	DefaultPending = 256 << 10
	// DefaultYields: a waiting SET parks right after its spin: at ~1,000
	// requests a second per SET the next one is a millisecond away, which no
	// yield catches (docs/DESIGN.md, No yields before a SET parks).
	DefaultYields   = -1
	DefaultShares   = 100
	DefaultTotal    = 20000
	AuthSecretEnv   = "HONGBAO_AUTH_SECRET"
	maxSets         = 4096 // envelope ids carry the owning SET in 12 bits
	defaultShutdown = 10 * time.Second
	// DefaultRetention keeps a fully opened group envelope long enough for a
	// client's retried OPEN to be answered "already opened": 200 envelopes a
	// second cost ~25 MB for it, where keeping them for the whole TTL (24 h)
	// would cost gigabytes.
	DefaultRetention = 10 * time.Minute
	// DefaultShedDelay: well over a typical second's SHAKE p99 at a load the
	// server carries, and half the 100 ms the answers should stay under past
	// capacity (docs/DESIGN.md, Shedding by delay).
	DefaultShedDelay = 50 * time.Millisecond
	// DefaultStages: with many more SETs than cores, stages gain nothing
	// from overlapping and every wake-up costs (docs/DESIGN.md, Fused
	// stages).
	DefaultStages = "fused"
	// DefaultLoopWait: an idle epoll loop blocks in a raw epoll_wait; parked
	// in the netpoller it won only where other processes took the CPU in
	// bursts (docs/DESIGN.md, Idle loops block in epoll_wait).
	DefaultLoopWait = "syscall"
	// DefaultSendRate, DefaultSendBurst: a person sends a red envelope every
	// few seconds at most; 10 a second with 20 at once leaves any client
	// room for a retry storm while one connection cannot create
	// thousands a second.
	DefaultSendRate  = 10
	DefaultSendBurst = 20
	// DefaultChatRate, DefaultChatBurst: a person types a message every few
	// seconds; 20 a second with 50 at once leaves room for a client sending
	// what it queued while offline, and is far above the load tools (the
	// load client spreads -chat-rate over all its users: under 0.01 a second
	// each in make demo-cluster). One sender then hands a recipient at most
	// ~20 KiB of chats a second (1 KiB each), not the ~70,000 a second of an
	// unlimited pipeline.
	DefaultChatRate  = 20
	DefaultChatBurst = 50
	// DefaultMaxLivePerUser: each live envelope is held until opened or its
	// TTL (24 h): 100 per user keep one account's share of memory within
	// ~100 KiB (~600 KiB with pushes kept for 100 offline recipients each)
	// and are more than anyone waits on at once.
	DefaultMaxLivePerUser = 100
	// DefaultMaxEnvelopes is derived from memory: a live group envelope of
	// 100 recipients holds ~1 KiB (MaxEnvelopeBytes), so 1 Mi of them hold
	// ~1 GiB. A push kept for an offline recipient adds up to ~64 bytes
	// (PendingPushBytes): ~7 GiB at worst, every recipient of every envelope
	// a distinct user who never logs in (stages.TestBudgetBoundsMemory
	// measures ~7.0 KiB an envelope then).
	DefaultMaxEnvelopes = 1 << 20
	// MaxEnvelopeBytes is the memory of one live group envelope of 100
	// recipients: the group with its recipients and shares (800 bytes), its
	// map entry, its expiry queue slot.
	MaxEnvelopeBytes = 1024
	// PendingPushBytes is the memory of one push kept for an offline
	// recipient: its ring slot and, at most, its user's map entry (about 61
	// bytes measured in stages.TestBudgetBoundsMemory).
	PendingPushBytes = 64
)

// Defaults of the campaign and admin bounds, each with its reason.
const (
	AdminTokenEnv = "HONGBAO_ADMIN_TOKEN"
	ReadTokenEnv  = "HONGBAO_READ_TOKEN"
	NATSPassEnv   = "HONGBAO_NATS_PASSWORD"
	// DefaultMaxCampaigns: the operators' campaigns are few; the bound is
	// against a script gone wrong, not a limit anyone should meet.
	DefaultMaxCampaigns = 64
	// DefaultMaxPool: a pooled shake envelope costs ~12 bytes
	// (envelope/pool_test.go), so 4,194,304 of them ~48 MiB; at the
	// fastest campaign rate (10^6/s) that is 4 s of dealing nobody shook.
	DefaultMaxPool = 1 << 22
	// DefaultData is in the working directory, so that a server started
	// without flags keeps its money across a restart.
	DefaultData = "data"
	// DefaultReplicas: a majority of three survives one NATS server down.
	DefaultReplicas = 3
	// DefaultLease: long enough that a GC pause or a NATS reconnect (100 ms)
	// does not look like death, short enough that a dead gateway's users
	// wait for it ~2 s at most (docs/DESIGN.md, The lease).
	DefaultLease = 1500 * time.Millisecond
	// DefaultRebalance paces a cluster evening out, a SET at a time per
	// gateway: each move pauses its SET briefly and has the target load it,
	// so a joining gateway takes its share over seconds rather than all at
	// once (docs/DESIGN.md, Moving a SET).
	DefaultRebalance = time.Second
	// DefaultSnapshotEvery bounds what a start replays to a minute of
	// journal (at 60,000 SHAKE/s ~80 MB, a few seconds) and the journal kept
	// on disk with it; a snapshot of the default -max-pool and
	// -max-envelopes at their fullest is ~1 GiB, written in the background.
	DefaultSnapshotEvery = time.Minute
)

// Fill gives every unset field its default.
func (o *Options) Fill() {
	fillZero(&o.Listen, DefaultListen)
	fillZero(&o.Admin, DefaultAdmin)
	fillZero(&o.Ingress, "epoll")
	fillZero(&o.Wait, "park")
	fillZero(&o.Pipeline, "ring")
	fillZero(&o.Stages, DefaultStages)
	fillZero(&o.Egress, "batch")
	fillZero(&o.LoopWait, DefaultLoopWait)
	fillZero(&o.LogFormat, "text")
	fillZero(&o.LogLevel, "info")
	fillZero(&o.Sets, DefaultSets)
	fillZero(&o.Ring, DefaultRing)
	fillZero(&o.Loops, runtime.GOMAXPROCS(0))
	fillZero(&o.Yields, DefaultYields)
	fillZero(&o.LoginTimeout, 10*time.Second)
	fillZero(&o.MaxPending, DefaultPending)
	fillZero(&o.ShedDelay, DefaultShedDelay)
	fillZero(&o.MaxShares, DefaultShares)
	fillZero(&o.MaxTotal, DefaultTotal)
	fillZero(&o.EnvelopeTTL, 24*time.Hour)
	fillZero(&o.OpenedRetention, DefaultRetention)
	fillZero(&o.RequestWindow, stages.DefaultRequestWindow)
	// Nothing outlives its TTL: a longer retention would mean the TTL.
	o.OpenedRetention = min(o.OpenedRetention, o.EnvelopeTTL)
	fillZero(&o.ShutdownTimeout, defaultShutdown)
	fillZero(&o.SendRate, DefaultSendRate)
	fillZero(&o.SendBurst, DefaultSendBurst)
	fillZero(&o.ChatRate, DefaultChatRate)
	fillZero(&o.ChatBurst, DefaultChatBurst)
	fillZero(&o.MaxLivePerUser, DefaultMaxLivePerUser)
	fillZero(&o.ClusterTimeout, cluster.DefaultTimeout)
	fillZero(&o.MaxEnvelopes, DefaultMaxEnvelopes)
	fillZero(&o.MaxCampaigns, DefaultMaxCampaigns)
	fillZero(&o.MaxPool, DefaultMaxPool)
	fillZero(&o.Data, DefaultData)
	fillZero(&o.Journal, "on")
	fillZero(&o.Replicas, DefaultReplicas)
	fillZero(&o.Lease, DefaultLease)
	fillZero(&o.Rebalance, DefaultRebalance)
	fillZero(&o.SnapshotEvery, DefaultSnapshotEvery)
}

// fillZero sets *p to v if *p is unset (zero).
func fillZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports every invalid option, each with its flag and reason.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	for _, a := range strings.Split(o.Listen, ",") {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
			bad("listen", "%q is not host:port", a)
		}
	}
	if _, _, err := net.SplitHostPort(o.Admin); o.Admin != "off" && err != nil {
		bad("admin", "%q is not host:port (or off)", o.Admin)
	}
	if o.Sets < 1 || o.Sets > maxSets {
		bad("sets", "%d is not in 1..%d (envelope ids carry the SET in 12 bits)", o.Sets, maxSets)
	}
	if o.Ring < 16 || o.Ring&(o.Ring-1) != 0 || o.Ring > 1<<20 {
		bad("ring", "%d is not a power of two in 16..1048576", o.Ring)
	}
	if o.Loops < 1 || o.Loops > 1024 {
		bad("loops", "%d is not in 1..1024", o.Loops)
	}
	if o.Ingress != "epoll" && o.Ingress != "netpoll" {
		bad("ingress", "%q: want epoll or netpoll", o.Ingress)
	}
	if o.Spins < -1 || o.Yields < -1 {
		bad("spins", "-spins %d, -yields %d: want a count, or -1 for none", o.Spins, o.Yields)
	}
	if _, err := ring.ParseWait(o.Wait); err != nil {
		bad("wait", "%v", err)
	}
	switch o.Pipeline {
	case "ring", "disruptor", "chan", "none":
	default:
		bad("pipeline", "%q: want ring; disruptor or chan (transports for comparison); or none (the bare-I/O baseline)", o.Pipeline)
	}
	switch {
	case o.Stages != "pipelined" && o.Stages != "fused":
		bad("stages", "%q: want pipelined or fused", o.Stages)
	}
	switch {
	case o.LoopWait != "syscall" && o.LoopWait != "netpoller":
		bad("loop-wait", "%q: want syscall or netpoller", o.LoopWait)
	}
	switch {
	case o.Egress != "batch" && o.Egress != "frame":
		bad("egress", "%q: want batch, or frame (one write per frame, for comparison)", o.Egress)
	case o.Egress == "frame" && o.Pipeline == "none":
		bad("egress", "frame needs a pipeline with an egress stage: -pipeline=none answers in the ingress")
	}
	switch o.Journal {
	case "on", "off", "", "jetstream":
	default:
		bad("journal", "%q: want on, jetstream (SETs that fail over, with -nats), or off (nothing durable, for comparison)", o.Journal)
	}
	if o.Journal == "jetstream" {
		o.validateReplicated(bad)
	}
	if o.Journal != "off" && o.Pipeline != "none" && o.Data == "" && o.Journal != "" {
		bad("data", "empty: the journal needs a directory (or -journal off)")
	}
	if o.TraceSlow < 0 {
		bad("trace-slow", "%v is negative (0: never)", o.TraceSlow)
	}
	if o.TraceSlow > 0 && o.Pipeline == "none" {
		bad("trace-slow", "needs a pipeline with an egress stage, which times the answers: -pipeline=none answers in the ingress")
	}
	if o.MaxConns < 0 {
		bad("max-conns", "%d is negative", o.MaxConns)
	}
	if o.LoginTimeout <= 0 {
		bad("login-timeout", "%v: want a positive duration (0 would close every connection before its LOGIN)", o.LoginTimeout)
	}
	if o.MaxPending < 4096 {
		bad("max-pending", "%d is below one frame (4096 bytes)", o.MaxPending)
	}
	if o.MaxPending > 1<<30 {
		bad("max-pending", "%d is over 1 GiB (1073741824): a connection's backlog is judged in 32 bits", o.MaxPending)
	}
	if o.ShedDelay > ingress.MaxShedDelay {
		bad("shed-delay", "%v is over %v", o.ShedDelay, ingress.MaxShedDelay)
	}
	if o.MaxShares < 1 || o.MaxShares > 1019 {
		bad("max-shares", "%d is not in 1..1019 (the recipients one frame holds)", o.MaxShares)
	}
	if o.MaxTotal < o.MaxShares || o.MaxTotal > 1<<31 {
		bad("max-total", "%d is not in max-shares..2^31", o.MaxTotal)
	}
	if o.EnvelopeTTL < time.Second {
		bad("envelope-ttl", "%v is under a second", o.EnvelopeTTL)
	}
	if o.OpenedRetention < time.Second {
		bad("opened-retention", "%v is under a second", o.OpenedRetention)
	}
	if o.RequestWindow < time.Second || o.RequestWindow > 24*time.Hour {
		bad("request-window", "%v is not in 1s..24h", o.RequestWindow)
	}
	if o.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "%v: want a positive duration (the clients need a moment to read their ERROR 8)", o.ShutdownTimeout)
	}
	if !(o.SendRate > 0 && o.SendRate <= 1e9) {
		bad("send-rate", "%v is not in (0, 1e9] SENDs a second", o.SendRate)
	}
	if !(o.ChatRate > 0 && o.ChatRate <= ingress.MaxChatRate) {
		bad("chat-rate", "%v is not in (0, 1e9] CHATs a second", o.ChatRate)
	}
	for _, c := range []struct {
		flag string
		n    int
	}{{"send-burst", o.SendBurst}, {"chat-burst", o.ChatBurst}, {"max-live-per-user", o.MaxLivePerUser}, {"max-envelopes", o.MaxEnvelopes},
		{"max-campaigns", o.MaxCampaigns}, {"max-pool", o.MaxPool}} {
		if c.n < 1 {
			bad(c.flag, "%d is below 1", c.n)
		}
	}
	if o.AuthSecret != "" && o.AuthSecretFile != "" {
		bad("auth-secret-file", "give the secret by one means only (-auth-secret is also set)")
	}
	if o.AdminToken != "" && o.AdminTokenFile != "" {
		bad("admin-token-file", "give the token by one means only (-admin-token is also set)")
	}
	if o.ReadToken != "" && o.ReadTokenFile != "" {
		bad("read-token-file", "give the token by one means only (-read-token is also set)")
	}
	if (o.AdminTLSCert == "") != (o.AdminTLSKey == "") {
		bad("admin-tls-key", "give -admin-tls-cert and -admin-tls-key together")
	}
	if o.AdminTLSCA != "" && o.AdminTLSCert == "" {
		bad("admin-tls-client-ca", "needs -admin-tls-cert: client certificates are asked for over TLS")
	}
	if o.NATS != "" || o.Node != "" {
		o.validateCluster(bad)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		bad("log-format", "%q: want text or json", o.LogFormat)
	}
	switch o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", "%q: want debug, info, warn or error", o.LogLevel)
	}
	return errors.Join(errs...)
}

// secret returns the auth secret from the flag, the file or the environment.
func (o *Options) secret() ([]byte, error) {
	v, err := readSecret(o.AuthSecret, "auth-secret-file", o.AuthSecretFile, AuthSecretEnv)
	return []byte(v), err
}

// adminToken returns the admin token from the flag, the file or the
// environment; "" for none.
func (o *Options) adminToken() (string, error) {
	return headerToken("admin", o.AdminToken, "admin-token-file", o.AdminTokenFile, AdminTokenEnv)
}

// readToken returns the read-only token likewise, given the admin token;
// one without an admin token is an error: nothing is checked then, and the
// read token would seem to protect what it does not.
func (o *Options) readToken(admin string) (string, error) {
	t, err := headerToken("read", o.ReadToken, "read-token-file", o.ReadTokenFile, ReadTokenEnv)
	switch {
	case err != nil || t == "":
		return t, err
	case admin == "":
		return "", errors.New("-read-token without -admin-token: without an admin token the admin API checks nothing")
	case admin == t:
		return "", errors.New("-read-token is the admin token: give it a token of its own")
	}
	return t, nil
}

// headerToken reads a bearer token (readSecret) that an Authorization
// header can carry exactly.
func headerToken(name, value, flag, file, env string) (string, error) {
	t, err := readSecret(value, flag, file, env)
	if err == nil && (strings.TrimSpace(t) != t || strings.ContainsAny(t, "\r\n\x00")) {
		// HTTP strips the whitespace around a header's value before any
		// handler sees it: such a token would never match, or match a
		// header without it.
		return "", fmt.Errorf("the %s token begins or ends with whitespace, or holds a line break: no Authorization header can carry it exactly", name)
	}
	return t, err
}

// readSecret returns value if set, else the content of file (less its final
// line break; flag names the file's flag in errors), else $env. A file that
// is empty is an error: it would silently turn the protection off.
func readSecret(value, flag, file, env string) (string, error) {
	switch {
	case value != "":
		return value, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-%s: %w", flag, err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("-%s: %s is empty", flag, file)
		}
		return v, nil
	}
	return os.Getenv(env), nil
}

// Limits are the SEND limits of every SET. Each SET creates the envelopes of
// its own senders and campaign deals, so each gets an even share of the
// server's budget, rounded up.
func (o Options) Limits() stages.Limits {
	return stages.Limits{MaxShares: uint16(o.MaxShares), MaxTotal: uint32(o.MaxTotal), TTL: o.EnvelopeTTL, Retain: o.OpenedRetention,
		RequestWindow: o.RequestWindow, SendRate: o.SendRate, SendBurst: o.SendBurst, MaxLive: o.MaxLivePerUser,
		MaxEnvelopes: (o.MaxEnvelopes + o.localSets() - 1) / o.localSets()}
}
