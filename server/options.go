package server

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"hongbao/ingress"
	"hongbao/ring"
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
}

// Defaults, each with its reason.
const (
	DefaultListen  = "127.0.0.1:9000"
	DefaultAdmin   = "127.0.0.1:6060"
	DefaultSets    = 32   // many more shards than cores, so one busy SET never serializes the whole load
	DefaultRing    = 2048 // per SET: 2048 × 120-byte events = 240 KiB, 7.5 MiB for 32 SETs
	DefaultPending = 256 << 10
	// DefaultYields: a waiting SET parks right after its spin. At ~1,000
	// requests a second per SET the next one is a millisecond away, and the
	// ring's default 8 runtime.Gosched rounds only cost scheduler work: at
	// 30,000 QPS over 19,000 connections, server CPU per SHAKE 4.8 % lower
	// (median of 5 interleaved 15 s runs, 939 vs 986 ticks), p99 no worse.
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
	// DefaultShedDelay: over 10× a typical second's SHAKE p99 at 30,000
	// SHAKE/s over 19,000 connections (1.7–3.5 ms), whose worse seconds (up
	// to 88 ms) pass within the interval of 2 × ShedDelay unrefused: nothing
	// was refused at that load. And half the 100 ms the answers should stay
	// under past capacity, leaving the other half to the rings and writes.
	DefaultShedDelay = 50 * time.Millisecond
	// DefaultStages: with 32 SETs on 2 cores, stages gain nothing from
	// overlapping and every wake-up costs; fused measured 0.88× the server
	// CPU per SHAKE of pipelined at 30,000 QPS and a lower p99 at 60,000
	// (make perf-compare, README).
	DefaultStages = "fused"
)

// Fill gives every unset field its default.
func (o *Options) Fill() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.Listen, DefaultListen)
	def(&o.Admin, DefaultAdmin)
	def(&o.Ingress, "epoll")
	def(&o.Wait, "park")
	def(&o.Pipeline, "ring")
	def(&o.Stages, DefaultStages)
	def(&o.Egress, "batch")
	def(&o.LogFormat, "text")
	def(&o.LogLevel, "info")
	if o.Sets == 0 {
		o.Sets = DefaultSets
	}
	if o.Ring == 0 {
		o.Ring = DefaultRing
	}
	if o.Loops == 0 {
		o.Loops = runtime.GOMAXPROCS(0)
	}
	if o.Yields == 0 {
		o.Yields = DefaultYields
	}
	if o.LoginTimeout == 0 {
		o.LoginTimeout = 10 * time.Second
	}
	if o.MaxPending == 0 {
		o.MaxPending = DefaultPending
	}
	if o.ShedDelay == 0 {
		o.ShedDelay = DefaultShedDelay
	}
	if o.MaxShares == 0 {
		o.MaxShares = DefaultShares
	}
	if o.MaxTotal == 0 {
		o.MaxTotal = DefaultTotal
	}
	if o.EnvelopeTTL == 0 {
		o.EnvelopeTTL = 24 * time.Hour
	}
	if o.OpenedRetention == 0 {
		o.OpenedRetention = DefaultRetention
	}
	// Nothing outlives its TTL: a longer retention would mean the TTL.
	o.OpenedRetention = min(o.OpenedRetention, o.EnvelopeTTL)
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = defaultShutdown
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
	case o.Egress != "batch" && o.Egress != "frame":
		bad("egress", "%q: want batch, or frame (one write per frame, for comparison)", o.Egress)
	case o.Egress == "frame" && o.Pipeline == "none":
		bad("egress", "frame needs a pipeline with an egress stage: -pipeline=none answers in the ingress")
	}
	if o.MaxConns < 0 {
		bad("max-conns", "%d is negative", o.MaxConns)
	}
	if o.LoginTimeout < 0 {
		bad("login-timeout", "%v is negative", o.LoginTimeout)
	}
	if o.MaxPending < 4096 {
		bad("max-pending", "%d is below one frame (4096 bytes)", o.MaxPending)
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
	if o.ShutdownTimeout < 0 {
		bad("shutdown-timeout", "%v is negative", o.ShutdownTimeout)
	}
	if o.AuthSecret != "" && o.AuthSecretFile != "" {
		bad("auth-secret-file", "give the secret by one means only (-auth-secret is also set)")
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
	switch {
	case o.AuthSecret != "":
		return []byte(o.AuthSecret), nil
	case o.AuthSecretFile != "":
		b, err := os.ReadFile(o.AuthSecretFile)
		if err != nil {
			return nil, fmt.Errorf("-auth-secret-file: %w", err)
		}
		return []byte(strings.TrimRight(string(b), "\r\n")), nil
	}
	return []byte(os.Getenv(AuthSecretEnv)), nil
}

// ParseFlags parses the server's command line into Options, filled and
// validated.
func ParseFlags(fs *flag.FlagSet, args []string) (Options, error) {
	var o Options
	fs.StringVar(&o.Listen, "listen", DefaultListen, "client `addresses`, comma-separated host:port")
	fs.StringVar(&o.Admin, "admin", DefaultAdmin, "admin HTTP `address` (/metrics, /stats, /campaigns, /debug/pprof); off to disable")
	fs.StringVar(&o.AdminToken, "admin-token", "", "if set, every admin request must carry Authorization: Bearer `TOKEN`")
	fs.IntVar(&o.Sets, "sets", DefaultSets, "number of SETs (shards): each owns its users, one ring and its stages")
	fs.IntVar(&o.Ring, "ring", DefaultRing, "`slots` per SET ring, a power of two; a full ring answers overloaded")
	fs.IntVar(&o.Loops, "loops", runtime.GOMAXPROCS(0), "ingress event loops (epoll)")
	fs.StringVar(&o.Ingress, "ingress", "epoll", "ingress: epoll (event loops, Linux) or netpoll (goroutine per connection)")
	fs.StringVar(&o.Wait, "wait", "park", "how idle stages wait: park (spin, yield, then sleep), yield, or spin (burns a core per stage)")
	fs.IntVar(&o.Spins, "spins", ring.DefaultSpins, "-wait park or yield: rounds a waiting stage re-checks its upstream before it yields (-1: none)")
	fs.IntVar(&o.Yields, "yields", DefaultYields, "-wait park: rounds of runtime.Gosched before a waiting stage parks (-1 or 0: none: park right after spinning)")
	fs.StringVar(&o.Stages, "stages", DefaultStages, "how a SET's ring runs its stages: pipelined (a goroutine per stage, which park and wake\n"+
		"one another: stages overlap on several cores) or fused (one goroutine per SET hands each batch to\n"+
		"every stage in turn: one wake-up per batch instead of four, for many more SETs than cores).\n"+
		"-pipeline=ring only: the other transports always run a goroutine per stage")
	fs.StringVar(&o.Pipeline, "pipeline", "ring", "what carries each SET's events through its stages (session → shake → split → egress):\n"+
		"ring: our Disruptor, stages park when idle (the default; -wait applies to it only);\n"+
		"disruptor: github.com/smarty/go-disruptor v0.5.0 with its default wait strategy (idle stages poll with sleeps);\n"+
		"chan: a buffered channel and a goroutine per stage;\n"+
		"none: no stages, the ingress answers every SHAKE itself with status 0 (the bare-I/O baseline).\n"+
		"All but ring exist for comparison (make perf-compare)")
	fs.StringVar(&o.Egress, "egress", "batch", "how egress writes answers: batch (one write per connection per batch, the default)\n"+
		"or frame (one write per answer frame, at once; for comparison: make perf-compare)")
	fs.IntVar(&o.MaxConns, "max-conns", 0, "connections beyond this are closed at accept (0: no limit but the open-files limit)")
	fs.DurationVar(&o.LoginTimeout, "login-timeout", 10*time.Second, "a connection that sends no LOGIN by then gets ERROR 7 and is closed")
	fs.IntVar(&o.MaxPending, "max-pending", DefaultPending, "`bytes` of unwritten output a connection may have before ERROR 6 and close")
	fs.DurationVar(&o.ShedDelay, "shed-delay", DefaultShedDelay, "once requests wait longer than this in the kernel before being read, for twice this long\n"+
		"without a break, answer the SHAKEs and CHATs that waited longer \"overloaded\" at once until they stop\n"+
		"(OPEN, SEND, LOGIN and PING are never refused for it); negative: never. The default is over 10×\n"+
		"a typical second's p99 at a load the server carries, whose worse seconds the 2× window absorbs,\n"+
		"and half of the 100 ms the answers should stay under past capacity")
	fs.StringVar(&o.AuthSecret, "auth-secret", "", "HMAC secret for LOGIN tokens (visible in ps: prefer -auth-secret-file or $"+AuthSecretEnv+")")
	fs.StringVar(&o.AuthSecretFile, "auth-secret-file", "", "read the auth secret from this `file`")
	fs.BoolVar(&o.ReusePort, "reuseport", false, "set SO_REUSEPORT so several server processes share a port")
	fs.IntVar(&o.MaxShares, "max-shares", DefaultShares, "most recipients of one SEND")
	fs.IntVar(&o.MaxTotal, "max-total", DefaultTotal, "largest SEND total in fen")
	fs.DurationVar(&o.EnvelopeTTL, "envelope-ttl", 24*time.Hour, "group envelopes not fully opened by then expire and are refunded")
	fs.DurationVar(&o.OpenedRetention, "opened-retention", DefaultRetention, "a fully opened group envelope is kept this long, so that a repeated OPEN answers 1 (already opened) with its share; later OPENs answer 3 (no such envelope), as after -envelope-ttl, which also bounds it")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", defaultShutdown, "on SIGTERM, the longest to wait for clients to drain")
	fs.StringVar(&o.LogFormat, "log-format", "text", "text or json")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o.Fill()
	return o, o.Validate()
}
