package loadclient

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// Config is one load-client run. ParseFlags fills it from a command line; Fill gives every
// unset field its default and Validate reports every problem, each naming its flag.
type Config struct {
	Servers        []string      // -server: client addresses of the server; user u uses Servers[(u−1) mod len], the next after a failure
	Users          Range         // -users: the run's users, each its own connection
	TotalUsers     uint32        // -total-users: N of the global schedule over users 1..N; 0: Users.Last
	QPS            uint32        // -qps: total SHAKEs a second of all users 1..N
	Phases         string        // -phases: a plan, ParsePlan syntax; overrides QPS
	Duration       time.Duration // -duration: from the start until the loops stop sending
	Loops          int           // -loops: event loops; 0: GOMAXPROCS
	ConnectRate    int           // -connect-rate: new connections a second, all loops together
	ConnectTimeout time.Duration // -connect-timeout
	Timeout        time.Duration // -timeout: a connection waiting this long for an answer is dropped
	Sources        []netip.Addr  // -source: local addresses to bind, round-robin
	AuthSecret     string        // -auth-secret: mint LOGIN tokens with it
	SendRate       float64       // -send-rate: SENDs a second, the whole run
	SendRecipients int           // -send-recipients
	SendTotal      uint32        // -send-total: fen per SEND
	ChatRate       float64       // -chat-rate: CHATs a second, the whole run
	ChatSize       int           // -chat-size: text bytes per CHAT
	ChurnRate      float64       // -churn: reconnects a second, the whole run
	RequestIDs     bool          // -request-ids: every SHAKE carries a request id, and one in flight when its connection ends is sent again with it
	Control        string        // -control: HTTP address for /qps and /metrics; "" off
	Admin          string        // -admin: the server's admin URLs for /stats, comma-separated, read in turn; "" no reconciliation
	AdminToken     string        // -admin-token
	Reconcile      string        // -reconcile: strict | at-least | off; "" strict with -admin, else off
	Restarts       bool          // -restarts: servers stop and start during the run: refused connects and resets are not failures
	Grace          time.Duration // -grace: the longest wait for answers in flight after the run
	Report         string        // -report: JSON report file
	History        string        // -history: every money answer told, a CSV line each
	Timeline       string        // -timeline: per-second CSV file
	Procs          int           // -procs: child processes; 1 runs in this process
	Quiet          bool          // -quiet: no live line
	Sched          string        // -sched: batch | normal, the process's threads' policy; "" leaves it as it is

	// Set by a -procs parent on its children (hidden flags).
	child   bool  // -child: talk JSON lines on stdin/stdout instead of printing
	local   Range // -child-users: the users this process connects; zero: all of Users
	startNs int64 // -start-ns: the run's start, Unix ns; 0: the next whole second
}

// Defaults, each with its reason.
const (
	DefaultServer      = "127.0.0.1:9000" // the server's default -listen
	DefaultAdmin       = ""               // reconciliation is opt-in: it is exact only when the run is the server's only client
	DefaultUsers       = "1-1000"
	DefaultQPS         = 1000
	DefaultDuration    = 30 * time.Second
	DefaultConnectRate = 5000 // new TCP connections a second: a ramp the server's accept loop takes easily
	DefaultTimeout     = 5 * time.Second
	DefaultGrace       = 5 * time.Second
	DefaultRecipients  = 5
	DefaultSendTotal   = 500 // fen: 5 shares of 1 yuan on average, within the server's 20000
	DefaultChatSize    = 64

	// fdMargin is the descriptors a process keeps for itself beyond one per user: epoll,
	// eventfds, the control and admin HTTP connections, stdio, the Go runtime.
	fdMargin = 64
)

// -sched policies.
const (
	SchedBatch  = "batch"  // SCHED_BATCH: its wake-ups preempt no running thread
	SchedNormal = "normal" // SCHED_OTHER
)

// Range is an inclusive range of user ids, written "MIN-MAX" (or one id). The zero value is
// empty.
type Range struct{ First, Last uint32 }

// Len returns the number of ids in r.
func (r Range) Len() int {
	if r.First == 0 {
		return 0
	}
	return int(r.Last-r.First) + 1
}

func (r Range) String() string {
	if r.First == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// ParseRange parses "MIN-MAX" or "ID" into a Range with 1 ≤ MIN ≤ MAX.
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	hi, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if err1 != nil || err2 != nil || lo < 1 || lo > hi {
		return Range{}, fmt.Errorf("cannot parse user range %q: want MIN-MAX with 1 ≤ MIN ≤ MAX < 2^32", s)
	}
	return Range{uint32(lo), uint32(hi)}, nil
}

// ParseSources parses a comma-separated list of IP addresses and IPv4 ranges
// ("127.0.0.2-127.0.0.40", the last octets counting up).
func ParseSources(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, isRange := strings.Cut(part, "-")
		lo, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("cannot parse source address %q: %w", a, err)
		}
		if !isRange {
			out = append(out, lo)
			continue
		}
		hi, err := netip.ParseAddr(b)
		if err != nil {
			return nil, fmt.Errorf("cannot parse source address %q: %w", b, err)
		}
		if !lo.Is4() || !hi.Is4() || hi.Less(lo) {
			return nil, fmt.Errorf("cannot parse source range %q: want two IPv4 addresses, the first not above the second", part)
		}
		for x := lo; ; x = x.Next() {
			out = append(out, x)
			if len(out) > 1<<16 {
				return nil, fmt.Errorf("source range %q: more than 65536 addresses", part)
			}
			if x == hi {
				break
			}
		}
	}
	return out, nil
}

// Fill gives every unset field its default.
func (c *Config) Fill() {
	if len(c.Servers) == 0 {
		c.Servers = []string{DefaultServer}
	}
	if c.Users.First == 0 {
		c.Users, _ = ParseRange(DefaultUsers)
	}
	if c.TotalUsers == 0 {
		c.TotalUsers = c.Users.Last
	}
	if c.Loops == 0 {
		c.Loops = runtime.GOMAXPROCS(0)
	}
	if c.ConnectRate == 0 {
		c.ConnectRate = DefaultConnectRate
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultTimeout
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.SendRecipients == 0 {
		c.SendRecipients = DefaultRecipients
	}
	if c.SendTotal == 0 {
		c.SendTotal = DefaultSendTotal
	}
	if c.ChatSize == 0 {
		c.ChatSize = DefaultChatSize
	}
	if c.Procs == 0 {
		c.Procs = 1
	}
	if c.AdminToken == "" {
		c.AdminToken = os.Getenv(AdminTokenEnv)
	}
	if c.Reconcile == "" {
		c.Reconcile = ReconcileOff
		if c.Admin != "" {
			c.Reconcile = ReconcileStrict
		}
	}
	if c.local.First == 0 {
		c.local = c.Users
	}
}

// Validate reports every problem of a filled Config, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	for _, s := range c.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			bad("server", "%q is not host:port", s)
		}
	}
	if c.Users.Len() < 2 && (c.SendRate > 0 || c.ChatRate > 0) {
		bad("users", "SEND and CHAT need at least two users; got %v", c.Users)
	}
	if c.TotalUsers < c.Users.Last {
		bad("total-users", "%d is below the largest user id %d; the schedule covers users 1..N", c.TotalUsers, c.Users.Last)
	}
	if c.QPS > MaxQPS {
		bad("qps", "%d is above %d", c.QPS, MaxQPS)
	}
	if c.Phases != "" {
		if _, err := ParsePlan(c.Phases, 0); err != nil {
			bad("phases", "%v", err)
		}
	}
	if c.Duration < 0 {
		bad("duration", "%v is negative", c.Duration)
	}
	if c.Loops < 1 || c.Loops > 1024 {
		bad("loops", "%d is not in [1, 1024]", c.Loops)
	}
	if c.ConnectRate < 1 {
		bad("connect-rate", "%d: want at least 1 connection a second", c.ConnectRate)
	}
	if c.ConnectTimeout < time.Millisecond {
		bad("connect-timeout", "%v is below 1ms", c.ConnectTimeout)
	}
	if c.Timeout < time.Millisecond {
		bad("timeout", "%v is below 1ms", c.Timeout)
	}
	if c.SendRate < 0 {
		bad("send-rate", "%v is negative", c.SendRate)
	}
	if c.SendRecipients < 1 || c.SendRecipients > proto.MaxSendRecipients {
		bad("send-recipients", "%d is not in [1, %d]", c.SendRecipients, proto.MaxSendRecipients)
	} else if c.SendRate > 0 && c.SendRecipients >= c.Users.Len() {
		bad("send-recipients", "%d recipients need more than %d users (a sender is never its own recipient)", c.SendRecipients, c.Users.Len())
	}
	if c.SendTotal < uint32(max(c.SendRecipients, 1)) {
		bad("send-total", "%d fen cannot give each of %d recipients at least 1 fen", c.SendTotal, c.SendRecipients)
	}
	if c.ChatRate < 0 {
		bad("chat-rate", "%v is negative", c.ChatRate)
	}
	if c.ChurnRate < 0 {
		bad("churn", "%v is negative", c.ChurnRate)
	}
	if c.ChatSize < 0 || c.ChatSize > proto.MaxChatText {
		bad("chat-size", "%d is not in [0, %d]", c.ChatSize, proto.MaxChatText)
	}
	if c.Admin != "" && len(adminURLs(c.Admin)) == 0 {
		bad("admin", "%q names no URL", c.Admin)
	}
	switch c.Reconcile {
	case ReconcileStrict, ReconcileAtLeast:
		if c.Admin == "" {
			bad("reconcile", "%s needs -admin, the server's admin URL", c.Reconcile)
		}
	case ReconcileOff:
	default:
		bad("reconcile", "%q: want strict, at-least or off", c.Reconcile)
	}
	if c.Grace < 0 {
		bad("grace", "%v is negative", c.Grace)
	}
	if c.Sched != "" && c.Sched != SchedBatch && c.Sched != SchedNormal {
		bad("sched", "%q: want batch or normal", c.Sched)
	}
	if c.Procs < 1 || c.Procs > 1024 {
		bad("procs", "%d is not in [1, 1024]", c.Procs)
	} else if c.Procs > c.Users.Len() {
		bad("procs", "%d processes for %d users: want at most one process per user", c.Procs, c.Users.Len())
	}
	if c.Procs > 1 && c.History != "" {
		bad("history", "needs -procs 1: one process writes it")
	}
	if c.Procs > 1 && c.child {
		bad("procs", "a child process cannot have children")
	}
	if c.local.First < c.Users.First || c.local.Last > c.Users.Last {
		bad("child-users", "%v is not within -users %v", c.local, c.Users)
	}
	return errors.Join(errs...)
}

// hidden flags are for the -procs parent talking to its children: not in -help.
var hidden = map[string]bool{"child": true, "child-users": true, "start-ns": true}

// ParseFlags parses a load-client command line into a Config, filled and validated. On
// -help it prints the usage to fs.Output() and returns flag.ErrHelp.
func ParseFlags(fs *flag.FlagSet, args []string) (*Config, error) {
	c := &Config{}
	fs.Func("server", "server client `addresses`, comma-separated host:port: the gateways of a cluster, or one server; user u connects to the ((u-1) mod count)th, and after its connection fails to the next one in turn (default "+DefaultServer+")", func(s string) error {
		c.Servers = nil
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.Servers = append(c.Servers, a)
			}
		}
		if len(c.Servers) == 0 {
			return errors.New("no host:port address")
		}
		return nil
	})
	fs.Func("users", "the run's users `MIN-MAX`, each its own connection (default "+DefaultUsers+")", func(s string) (err error) {
		c.Users, err = ParseRange(s)
		return err
	})
	fs.Func("total-users", "`N`, the user count of the global schedule over users 1..N that -qps spreads over (default: MAX of -users). Several client machines with disjoint -users and the same -total-users, -qps and -phases send exactly -qps together", func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		if err == nil && n == 0 {
			err = errors.New("0 is not in 1..2^32-1 (leave it out for MAX of -users)")
		}
		c.TotalUsers = uint32(n)
		return err
	})
	fs.Func("qps", fmt.Sprintf("total SHAKEs a second (`rate`) of users 1..N, evenly spaced, open loop (default %d)", DefaultQPS), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		c.QPS = uint32(n)
		return err
	})
	c.QPS = DefaultQPS
	fs.StringVar(&c.Phases, "phases", "", "scripted QPS `plan` rate@duration,… from the start, e.g. 0@10s,30000@60s,60000@60s (a first 0 phase lets connections ramp up); overrides -qps")
	fs.DurationVar(&c.Duration, "duration", 0, "how long the loops send; every run stops by itself (default 30s, or the length of -phases when its last phase has a duration)")
	fs.IntVar(&c.Loops, "loops", 0, "epoll event loops, each owning a contiguous share of the users (default GOMAXPROCS)")
	fs.IntVar(&c.ConnectRate, "connect-rate", DefaultConnectRate, "new connections a second (`rate`), first connects and reconnects together")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", DefaultTimeout, "a connect not done by then counts as a connect error and is retried")
	fs.DurationVar(&c.Timeout, "timeout", DefaultTimeout, "a logged-in connection waiting this long for an answer (or a login) counts a timeout error and reconnects")
	fs.Func("source", "local `addresses` to bind, round-robin: a comma-separated list of IPs and IPv4 ranges like 127.0.0.2-127.0.0.40; binds with IP_BIND_ADDRESS_NO_PORT so that more than 28,000 connections reach one server address", func(s string) (err error) {
		c.Sources, err = ParseSources(s)
		return err
	})
	fs.StringVar(&c.AuthSecret, "auth-secret", "", "mint LOGIN tokens with this HMAC `secret` (the server's -auth-secret); empty: log in without a token")
	fs.Float64Var(&c.SendRate, "send-rate", 0, "group envelopes (SEND) a second (`rate`), the whole run, each from a random user to -send-recipients random users of -users")
	fs.IntVar(&c.SendRecipients, "send-recipients", DefaultRecipients, "recipients of each SEND")
	fs.Func("send-total", fmt.Sprintf("`fen` of each SEND (default %d)", DefaultSendTotal), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		if err == nil && n == 0 {
			err = errors.New("0 is not at least 1 fen a recipient")
		}
		c.SendTotal = uint32(n)
		return err
	})
	fs.Float64Var(&c.ChatRate, "chat-rate", 0, "CHATs a second (`rate`), the whole run, each from a random user to another random user of -users")
	fs.IntVar(&c.ChatSize, "chat-size", DefaultChatSize, "text `bytes` of each CHAT, at most 1024")
	fs.BoolVar(&c.RequestIDs, "request-ids", true, "give every SHAKE a request id (made of its stamp) and send a SHAKE in flight when its connection ended again, with the same id, once its user has logged in again: the server answers it as it answered the first, so an answer a fault cut off is told (docs/PROTOCOL.md, Request ids); false: a SHAKE in flight on a connection that ends is lost, its money counted by the server and never told (a server that does not know request ids would draw again)")
	fs.Float64Var(&c.ChurnRate, "churn", 0, "connection churn: reconnects a second (`rate`), the whole run, each a random logged-in user with nothing in flight closing its connection and connecting again at once (within -connect-rate); not errors, and the reconciliation stays exact")
	fs.StringVar(&c.Control, "control", "", "HTTP `address` serving GET /qps?set=N (change the rate at the next whole second) and /metrics (the counters, and the SHAKE latency as a histogram, as wrk2 and vegeta export theirs); empty: off")
	fs.StringVar(&c.Admin, "admin", DefaultAdmin, "the server's admin `URLs` (http://127.0.0.1:6060), comma-separated, for the reconciliation with GET /stats, read before the run and after it. Each read goes to the first that answers: list the admin URLs of several gateways, and one that died during the run does not stop the reconciliation")
	fs.StringVar(&c.AdminToken, "admin-token", "", "bearer `token` for -admin (visible in ps: prefer $"+AdminTokenEnv+", the server's own)")
	fs.BoolVar(&c.Restarts, "restarts", false, "servers stop and start during the run (a rolling restart of a cluster's gateways, each handing its SETs over first): refused connects and resets are reconnected, not failures, while -reconcile stays as strict as it is (-reconcile at-least implies it)")
	fs.StringVar(&c.Reconcile, "reconcile", "", "`mode`, strict, at-least or off. strict: read the server's /stats before the first connection (the baseline) and again after the run, once the answers in flight are in and the client has stopped opening pushes, and compare the change with the client's figures exactly (/cluster/stats, summed over the gateways, when GET /cluster lists several): the OPEN money is the OPEN 0 amounts and the shares learned by a repeated OPEN (one sent again after status 5 or a lost connection, answered 1), and every push opened ends with one of them, but for the opens the grace leaves without a final answer, which a mismatch names. Exact when this run is the server's only client during the run: money from before the run is in the baseline, other clients' money during the run breaks it; at-least: for a server that may be killed and restarted during the run: the money and the counts the client was told must each be at most the server's change since the baseline (an answer cut off by a crash is counted but never told), both ledger invariants exact, and failed connects and resets do not fail the run; off: skip (default strict with -admin, else off)")
	fs.DurationVar(&c.Grace, "grace", DefaultGrace, "after the run, the longest to wait for answers in flight and for OPENs sent again to settle")
	fs.StringVar(&c.Report, "report", "", "write the JSON report to this `file`")
	fs.StringVar(&c.History, "history", "", "write every money answer the load is told to this CSV `file` (user,kind,request,status,envelope,amount: a SHAKE's request is its request id, an OPEN's its envelope), for a check that no request was answered twice with different money and no envelope told to two requests; needs -procs 1")
	fs.StringVar(&c.Timeline, "timeline", "", "write the per-second timeline as CSV to this `file`")
	fs.IntVar(&c.Procs, "procs", 1, "run `N` child processes of this binary, each with a contiguous share of -users and of -source, and aggregate their figures; one process holds at most its open-files limit of connections")
	fs.BoolVar(&c.Quiet, "quiet", false, "no live line, only the summary")
	fs.StringVar(&c.Sched, "sched", SchedBatch, "how the kernel schedules this process's threads (Linux): batch (SCHED_BATCH: the same share of the CPU,\n"+
		"but an answer that wakes one never preempts a thread that is running, so a server on the same cores is not\n"+
		"interrupted inside the write that wakes the client, as a client on another machine could not interrupt it),\n"+
		"or normal (SCHED_OTHER: a woken client thread may preempt the server's)")
	fs.BoolVar(&c.child, "child", false, "internal: a child of -procs")
	fs.Func("child-users", "internal: the users this child connects", func(s string) (err error) {
		c.local, err = ParseRange(s)
		return err
	})
	fs.Int64Var(&c.startNs, "start-ns", 0, "internal: the run's start, Unix ns")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.child && c.AuthSecret == "" {
		c.AuthSecret = os.Getenv(childSecretEnv)
	}
	zeros := zeroFlags(fs)
	c.Fill()
	if c.Duration == 0 {
		c.Duration = defaultDuration(c.Phases)
	}
	return c, errors.Join(zeros, c.Validate())
}

// zeroMeansDefault holds the flags whose 0 in a Config means "the default"
// (Fill), each with what is wrong with a 0 given on the command line, where 0
// is a bad value like any other, not a way to ask for the default.
// -total-users and -send-total refuse 0 as they parse.
var zeroMeansDefault = map[string]string{
	"duration":        "not above 0 (leave it out for 30s or the length of -phases)",
	"loops":           "not in 1..1024 (leave it out for GOMAXPROCS)",
	"connect-rate":    "not at least 1 connection a second",
	"connect-timeout": "below 1ms",
	"timeout":         "below 1ms",
	"grace":           "not above 0",
	"send-recipients": fmt.Sprintf("not in 1..%d", proto.MaxSendRecipients),
	"chat-size":       fmt.Sprintf("not in 1..%d", proto.MaxChatText),
	"procs":           "not in 1..1024",
}

// zeroFlags reports the flags of zeroMeansDefault given 0 on the command line.
func zeroFlags(fs *flag.FlagSet) error {
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if want, ok := zeroMeansDefault[f.Name]; ok && (f.Value.String() == "0" || f.Value.String() == "0s") {
			errs = append(errs, fmt.Errorf("-%s: 0 is %s", f.Name, want))
		}
	})
	return errors.Join(errs...)
}

// defaultDuration is 30 s, or the length of a plan whose last phase ends.
func defaultDuration(phases string) time.Duration {
	if phases == "" {
		return DefaultDuration
	}
	plan, err := ParsePlan(phases, 0)
	if err != nil || plan[len(plan)-1].QPS != 0 {
		return DefaultDuration
	}
	return time.Duration(plan[len(plan)-1].AtNs)
}

func usage(fs *flag.FlagSet) {
	w := fs.Output()
	io.WriteString(w, `loadclient drives a hongbao server: every user of -users holds its own TCP connection,
logs in, SHAKEs on the global open-loop schedule (-qps or -phases), opens every ENVELOPE pushed
to it until its OPEN gets a final answer, and optionally SENDs group envelopes and CHATs. It
prints a live line every second and a summary at the end, and reconciles its money with the
change of the server's /stats over the run (-admin). It exits non-zero on any connect, reset,
timeout or protocol error (but for refused connects and resets with -reconcile at-least) and
on a reconciliation mismatch.

A user whose connection fails (a connect refused or timed out, a reset or close, ERROR 8
shutting down, ERROR 9 moved: its SET moved or failed over to another gateway, no answer within
-timeout) connects again after a backoff with jitter (100 ms doubling up to 1 s, ±25%), to the
next -server address in turn (a gateway that died refuses for good), and LOGINs again. LOGIN_ACK
3 sends it to the gateway it names; with no address (no owner yet) it tries again after the
backoff. What was in flight on the failed connection counts as lost, never as answered; at ERROR
9 as moved: the gateway answered everything it took before it, so those were not carried out.
An OPEN may have drawn a share either way: it counts as lost and is sent again after the next
login, as is an OPEN answered 5 (overloaded, or in a cluster not answered in time) after 50 to
100 ms; a repeated OPEN answers 1 with the share drawn before, told then and counted once. The
summary and -report count the outages, the moves (ERROR 9), the reconnects and the redirects,
the OPENs sent again and the shares they learned, and the longest time a user was without a
connection.

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		if hidden[f.Name] {
			return
		}
		name, text := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(text, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			line += fmt.Sprintf(" (default %v)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}
