package server

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"hongbao/cluster"
	"hongbao/ingress"
	"hongbao/journal"
	"hongbao/ring"
	"hongbao/stages"
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
	ShutdownTimeout time.Duration // -shutdown-timeout
	LogFormat       string        // -log-format: text | json
	LogLevel        string        // -log-level: debug | info | warn | error
	AdminTokenFile  string        // -admin-token-file
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
	t, err := readSecret(o.AdminToken, "admin-token-file", o.AdminTokenFile, AdminTokenEnv)
	if err == nil && (strings.TrimSpace(t) != t || strings.ContainsAny(t, "\r\n\x00")) {
		// HTTP strips the whitespace around a header's value before any
		// handler sees it: such a token would never match, or match a
		// header without it.
		return "", errors.New("the admin token begins or ends with whitespace, or holds a line break: no Authorization header can carry it exactly")
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

// ParseFlags parses the server's command line into Options, validated and
// filled.
func ParseFlags(fs *flag.FlagSet, args []string) (Options, error) {
	var o Options
	fs.StringVar(&o.Listen, "listen", DefaultListen, "client `addresses`, comma-separated host:port")
	fs.StringVar(&o.Admin, "admin", DefaultAdmin, "admin HTTP `address` (/metrics, /stats, /campaigns, /debug/pprof); off to disable")
	fs.StringVar(&o.AdminToken, "admin-token", "", "if set, every admin request must carry Authorization: Bearer `TOKEN` (visible in ps: prefer -admin-token-file or $"+AdminTokenEnv+")")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "", "read the admin token from this `file` (less a final line break; an empty file is an error: it would turn the check off)")
	fs.IntVar(&o.Sets, "sets", DefaultSets, "number of SETs (shards), 1..4096: each owns its users, one ring and its stages")
	fs.IntVar(&o.Ring, "ring", DefaultRing, "`slots` per SET ring, a power of two in 16..1048576; a full ring answers overloaded")
	fs.IntVar(&o.Loops, "loops", runtime.GOMAXPROCS(0), "ingress event loops (epoll), 1..1024")
	fs.StringVar(&o.Ingress, "ingress", "epoll", "ingress: epoll (event loops, Linux) or netpoll (goroutine per connection)")
	fs.StringVar(&o.Wait, "wait", "park", "how idle stages wait: park (spin, yield, then sleep), yield, or spin (burns a core per stage)")
	fs.IntVar(&o.Spins, "spins", ring.DefaultSpins, "-wait park or yield: rounds a waiting stage re-checks its upstream before it yields (-1: none)")
	fs.IntVar(&o.Yields, "yields", DefaultYields, "-wait park: rounds of runtime.Gosched before a waiting stage parks (-1 or 0: none: park right after spinning)")
	fs.StringVar(&o.Stages, "stages", DefaultStages, "how a SET's ring runs its stages: pipelined (a goroutine per stage, which park and wake\n"+
		"one another: stages overlap on several cores) or fused (one goroutine per SET hands each batch to\n"+
		"every stage in turn: one wake-up per batch instead of four, for many more SETs than cores).\n"+
		"-pipeline=ring only: the other transports always run a goroutine per stage")
	fs.BoolVar(&o.Handoff, "handoff", false, "-stages fused: the epoll loops never run a SET's stages themselves; every request wakes its SET's\n"+
		"goroutine (by default a loop runs the batch of a SET it published into when no other goroutine\n"+
		"runs it: no hand-off in the common case)")
	fs.StringVar(&o.LoopWait, "loop-wait", DefaultLoopWait, "how an idle epoll loop blocks: syscall (a raw epoll_wait, which keeps the loop's P until the\n"+
		"runtime's sysmon retakes it) or netpoller (parked in Go's netpoller on its epoll descriptor, holding no P)")
	fs.StringVar(&o.Pipeline, "pipeline", "ring", "what carries each SET's events through its stages (session → shake → split → egress):\n"+
		"ring: our Disruptor, stages park when idle (the default; -wait applies to it only);\n"+
		"disruptor: github.com/smarty/go-disruptor v0.5.0 with its default wait strategy (idle stages poll with sleeps);\n"+
		"chan: a buffered channel and a goroutine per stage;\n"+
		"none: no stages, the ingress answers every SHAKE itself with status 0 (the bare-I/O baseline).\n"+
		"All but ring exist for comparison (make perf-compare)")
	fs.StringVar(&o.Egress, "egress", "batch", "how egress writes answers: batch (one write per connection per batch, the default)\n"+
		"or frame (one write per answer frame, at once; for comparison: make perf-compare)")
	fs.IntVar(&o.MaxConns, "max-conns", 0, fmt.Sprintf("client connections beyond this are closed at accept and counted (0: the open-files limit less %d descriptors\n"+
		"kept for the admin API and the server's own files; a larger value is lowered to that, with a warning)", FDReserve))
	fs.DurationVar(&o.LoginTimeout, "login-timeout", 10*time.Second, "a connection that sends no LOGIN by then gets ERROR 7 and is closed")
	fs.IntVar(&o.MaxPending, "max-pending", DefaultPending, "`bytes` of unwritten output a connection may have before ERROR 6 and close, at most 1 GiB;\n"+
		"chats that would take it past half of this are dropped instead (CHAT_ACK 2), so chats alone never cut a reader off")
	fs.DurationVar(&o.ShedDelay, "shed-delay", DefaultShedDelay, "once requests wait longer than this in the kernel before being read, for twice this long\n"+
		"without a break, answer the SHAKEs and CHATs that waited longer \"overloaded\" at once until they stop\n"+
		"(OPEN, SEND, LOGIN and PING are never refused for it); negative: never. The default is over 10×\n"+
		"a typical second's p99 at a load the server carries, whose worse seconds the 2× window absorbs,\n"+
		"and half of the 100 ms the answers should stay under past capacity")
	fs.StringVar(&o.AuthSecret, "auth-secret", "", "HMAC secret for LOGIN tokens (visible in ps: prefer -auth-secret-file or $"+AuthSecretEnv+")")
	fs.StringVar(&o.AuthSecretFile, "auth-secret-file", "", "read the auth secret from this `file`")
	fs.BoolVar(&o.ReusePort, "reuseport", false, "set SO_REUSEPORT so several server processes share a port, the kernel spreading the connections.\n"+
		"Without -nats each process is a server of its own (its own users, pools, ledger: a user can be logged\n"+
		"in on two at once), which is right for a restart hand-over only; with -nats they are gateways of one cluster")
	fs.IntVar(&o.MaxShares, "max-shares", DefaultShares, "most recipients of one SEND")
	fs.IntVar(&o.MaxTotal, "max-total", DefaultTotal, "largest SEND total in fen")
	fs.DurationVar(&o.EnvelopeTTL, "envelope-ttl", 24*time.Hour, "group envelopes not fully opened by then expire and are refunded")
	fs.DurationVar(&o.OpenedRetention, "opened-retention", DefaultRetention, "a fully opened group envelope is kept this long, so that a repeated OPEN answers 1 (already opened) with its share; later OPENs answer 3 (no such envelope), as after -envelope-ttl, which also bounds it")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", defaultShutdown, "on SIGTERM, the longest to wait for clients to drain")
	fs.Float64Var(&o.SendRate, "send-rate", DefaultSendRate, "SENDs a second one user may make on average, past its burst; past it SEND_ACK 3.\n"+
		"A token bucket per user, kept across reconnects. A person sends one every few seconds at most;\n"+
		"10 lets no client create thousands a second")
	fs.IntVar(&o.SendBurst, "send-burst", DefaultSendBurst, "SENDs one user may make at once (its bucket's size): room for a client's retries")
	fs.Float64Var(&o.ChatRate, "chat-rate", DefaultChatRate, "CHATs a second one connection may send on average, past its burst; past it CHAT_ACK 3, answered at once.\n"+
		"A token bucket per connection: a reconnect starts with a full one. A person types a message every few\n"+
		"seconds; 20 keeps one sender to ~20 KiB of chats a second at its recipient")
	fs.IntVar(&o.ChatBurst, "chat-burst", DefaultChatBurst, "CHATs one connection may send at once (its bucket's size): room for what a client queued while offline")
	fs.IntVar(&o.MaxLivePerUser, "max-live-per-user", DefaultMaxLivePerUser, "group envelopes one user may have live (not fully opened, not expired); past it\n"+
		"SEND_ACK 3. Each is held until opened or -envelope-ttl: 100 keep one account within ~100 KiB\n"+
		"(~600 KiB if all its recipients are offline), more than anyone waits on at once")
	fs.IntVar(&o.MaxEnvelopes, "max-envelopes", DefaultMaxEnvelopes, fmt.Sprintf("live group envelopes of the whole server (users' and campaigns'), split evenly over the SETs;\n"+
		"past it SEND_ACK 3. Derived from memory: ~%d bytes a live envelope of 100 recipients, plus up to\n"+
		"~%d bytes per ENVELOPE push kept for an offline recipient: the default holds ~1 GiB (~7 GiB at worst)", MaxEnvelopeBytes, PendingPushBytes))
	fs.StringVar(&o.LogFormat, "log-format", "text", "text or json")
	fs.IntVar(&o.MaxCampaigns, "max-campaigns", DefaultMaxCampaigns, "most campaigns running at once; more answer 429 (a bound against a runaway script: operators run a few)")
	fs.IntVar(&o.MaxPool, "max-pool", DefaultMaxPool, "shake `envelopes` the SETs' pools may hold in all: shake campaigns deal only while the pools hold fewer,\n"+
		"and wait (\"waiting\": \"pool full\") meanwhile; ~12 bytes an envelope, so the default is ~48 MiB,\n"+
		"4 s of the fastest campaign that nobody shakes")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.Data, "data", DefaultData, "`directory` of the journal (and the snapshots): every answer about money leaves only once the change\n"+
		"it reports is on disk there, and a restart with the same -data recovers it. The default is in the\n"+
		"working directory so that a server started without flags keeps its money; one server per directory")
	fs.StringVar(&o.Journal, "journal", "on", "on: money is made durable under -data before it is answered (docs/PROTOCOL.md, Durability);\n"+
		"jetstream (a cluster, with -nats): on NATS JetStream, replicated -replicas times, each SET owned by one gateway\n"+
		"at a time and taken over by the others when its gateway's -lease lapses (docs/CLUSTER.md, Failover);\n"+
		"off: nothing is written and a restart starts from an empty ledger (for comparison only: make perf-compare)")
	fs.StringVar(&o.Name, "name", "", "-journal jetstream: this gateway's `name` in the ownership records and logs, unique in the cluster (default gw<node>)")
	fs.IntVar(&o.Replicas, "replicas", DefaultReplicas, "-journal jetstream: copies JetStream keeps of the journal and the snapshots, 1..5 (3 for a cluster of three\n"+
		"NATS servers; 1 for a single one), as the operator provisioned them (jsadmin). A record is acknowledged once a majority has it")
	fs.DurationVar(&o.Lease, "lease", DefaultLease, "-journal jetstream: a gateway not heard from for this long loses its SETs to the others (heartbeats every 250 ms)")
	fs.DurationVar(&o.Rebalance, "rebalance", DefaultRebalance, "-journal jetstream: least time between two of this gateway's SETs it hands, one at a time, to a gateway that runs fewer than\n"+
		"its share (one that joined): the cluster evens out by itself; negative: never by itself (POST /cluster/rebalance still does)")
	fs.BoolFunc("standby", "-journal jetstream (default true): follow, as they are appended, the records of the SETs this gateway would\n"+
		"take over should their gateway die, so that a takeover reads the last few instead of loading a snapshot and\n"+
		"replaying what follows it (docs/DESIGN.md, Standbys). Costs a second copy of those SETs' state in memory and\n"+
		"applying their records as their owner does", func(v string) error {
		on, err := strconv.ParseBool(v)
		o.NoStandby = !on
		return err
	})
	fs.BoolVar(&o.JournalRepair, "journal-repair", false, "start on a journal that is not whole (a bad round before its end, a segment or the checkpoint missing or cut short)\n"+
		"by cutting it where it stops being whole, instead of refusing to start: every byte cut is kept in a file beside the\n"+
		"segment (<segment>.cut-<unix time>) and each cut is logged. Money told to clients may be lost: restore from a copy first if there is one")
	fs.DurationVar(&o.JournalRound, "journal-round", journal.DefaultRoundEvery, "the least time from the start of one journal round (one write and one fdatasync) to the start of the next:\n"+
		"what is published meanwhile shares the round. An fdatasync costs about the same CPU whatever it holds, so\n"+
		"this trades up to that much latency of a money answer for fewer syncs under a light load. Negative: none")
	fs.DurationVar(&o.SnapshotEvery, "snapshot-every", DefaultSnapshotEvery, "how often the state is written to a snapshot under -data and the journal before it removed (and at SIGTERM);\n"+
		"a start replays only the journal after the newest snapshot: a minute keeps that to seconds. Negative: only at SIGTERM")
	fs.StringVar(&o.NATS, "nats", "", "`URL` of the NATS server(s) (comma-separated) over which gateways form one cluster\n"+
		"(docs/PROTOCOL.md, Clusters); empty: this server alone. Needs -node")
	fs.StringVar(&o.NATSCreds, "nats-creds", "", "this gateway's NATS identity as a .creds `file` (its user's JWT and nkey seed). Each gateway should be a NATS\n"+
		"user of its own that may publish on its own subjects only (deploy/nats/): without an identity, any client\n"+
		"of the NATS server can speak as any gateway, and a gateway says so in its log")
	fs.StringVar(&o.NATSNKey, "nats-nkey", "", "this gateway's NATS identity as a `file` holding its user's nkey seed")
	fs.StringVar(&o.NATSUser, "nats-user", "", "this gateway's NATS `user`; its password from -nats-password-file or $"+NATSPassEnv+", never the command line")
	fs.StringVar(&o.NATSPassFile, "nats-password-file", "", "read the -nats-user password from this `file` (less a final line break)")
	fs.StringVar(&o.NATSCA, "nats-ca", "", "connect to NATS over TLS, verifying its servers against the CAs in this PEM `file`")
	fs.StringVar(&o.NATSCert, "nats-cert", "", "present this PEM client certificate `file` to NATS (mutual TLS; with -nats-key)")
	fs.StringVar(&o.NATSKey, "nats-key", "", "the private key `file` of -nats-cert")
	fs.StringVar(&o.Node, "node", "", "`I/N`: this is gateway I of a cluster of N, running the SETs s with s mod N == I out of -sets\n"+
		"(the same -sets and N on every gateway: a gateway that differs refuses to start)")
	fs.StringVar(&o.Advertise, "advertise", "", "the client `address` other gateways send this one's users to (LOGIN_ACK 3); default: the first -listen address")
	fs.DurationVar(&o.ClusterTimeout, "cluster-timeout", cluster.DefaultTimeout, "an OPEN or CHAT that crosses to another gateway and gets no answer by then is answered\n"+
		"unavailable (OPEN_RESULT 5, CHAT_ACK 2); a share drawn for it stays its opener's, told by the OPEN sent again")
	fs.DurationVar(&o.TraceSlow, "trace-slow", 0, "when an answer's decode → write takes longer than this `duration`, write the runtime trace of the\n"+
		"last ~"+traceWindow.String()+" to -trace-dir (go tool trace; go run ./perf/cmd/slowtrace says where the time went): at most one\n"+
		"file every "+traceEvery.String()+" and "+fmt.Sprint(traceFiles)+" in all. It keeps Go's flight recorder running, a trace event for every\n"+
		"syscall: ~10 % more server CPU per SHAKE at 30,000/s. 0: off")
	fs.StringVar(&o.TraceDir, "trace-dir", "", "`directory` of the -trace-slow files (made if missing); default: traces under -data")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// Every flag has its default already: a 0 here was given and is judged
	// as given, not taken for "unset" as Fill would take it (only -yields
	// documents 0 as a value of its own: none, like -1).
	if err := o.Validate(); err != nil {
		return o, err
	}
	o.Fill()
	return o, nil
}

// Limits are the SEND limits of every SET. Each SET creates the envelopes of
// its own senders and campaign deals, so each gets an even share of the
// server's budget, rounded up.
func (o Options) Limits() stages.Limits {
	return stages.Limits{MaxShares: uint16(o.MaxShares), MaxTotal: uint32(o.MaxTotal), TTL: o.EnvelopeTTL, Retain: o.OpenedRetention,
		SendRate: o.SendRate, SendBurst: o.SendBurst, MaxLive: o.MaxLivePerUser,
		MaxEnvelopes: (o.MaxEnvelopes + o.localSets() - 1) / o.localSets()}
}
