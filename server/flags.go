package server

import (
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/hongbao-io/hongbao/cluster"
	"github.com/hongbao-io/hongbao/flightrec"
	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/ring"
	"github.com/hongbao-io/hongbao/stages"
)

// ParseFlags parses the server's command line into Options, validated and
// filled.
func ParseFlags(fs *flag.FlagSet, args []string) (Options, error) {
	var o Options
	fs.StringVar(&o.Listen, "listen", DefaultListen, "client `addresses`, comma-separated host:port")
	fs.StringVar(&o.Admin, "admin", DefaultAdmin, "admin HTTP `address` (/metrics, /stats, /campaigns, /debug/pprof); off to disable")
	fs.StringVar(&o.AdminToken, "admin-token", "", "if set, every admin request must carry Authorization: Bearer `TOKEN` (visible in ps: prefer -admin-token-file or $"+AdminTokenEnv+")")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "", "read the admin token from this `file` (less a final line break; an empty file is an error: it would turn the check off)")
	fs.StringVar(&o.ReadToken, "read-token", "", "a second bearer `TOKEN` that may only GET /metrics, /healthz, /stats, /campaigns, /cluster and /cluster/stats: for Prometheus, health checks and dashboards (needs -admin-token; visible in ps: prefer -read-token-file or $"+ReadTokenEnv+")")
	fs.StringVar(&o.ReadTokenFile, "read-token-file", "", "read the read-only token from this `file` (less a final line break)")
	fs.StringVar(&o.AdminTLSCert, "admin-tls-cert", "", "serve the admin API over TLS with this PEM certificate `file` (its chain; with -admin-tls-key); empty: plain HTTP")
	fs.StringVar(&o.AdminTLSKey, "admin-tls-key", "", "the PEM private key `file` of -admin-tls-cert")
	fs.StringVar(&o.AdminTLSCA, "admin-tls-client-ca", "", "with -admin-tls-cert, ask every admin client for a certificate that chains to a CA in this PEM `file` (mutual TLS); empty: none asked")
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
	fs.DurationVar(&o.RequestWindow, "request-window", stages.DefaultRequestWindow, "the first money answer to a SHAKE, OPEN or SEND that carries a request id is kept this long (counted from the second the id names), and a retry with the same id gets it again instead of a second draw or envelope; a retry past it is answered \"expired\" (SHAKE_RESULT 3, OPEN_RESULT 6, SEND_ACK 4) and does nothing. Memory: about 48 bytes per money answer in the window, nothing per user (docs/PROTOCOL.md, Request ids)")
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
		"last ~"+flightrec.Window.String()+" to -trace-dir (go tool trace; go run ./perf/cmd/slowtrace says where the time went): at most one\n"+
		"file every "+flightrec.Every.String()+" and "+fmt.Sprint(flightrec.Files)+" in all. It keeps Go's flight recorder running, a trace event for every\n"+
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
