package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/hongbao-io/hongbao/event"
)

// Modes of an Ingress (Options.Mode).
const (
	// ModeEpoll runs Options.Loops event loops on Linux epoll: no goroutine
	// per connection. Linux only.
	ModeEpoll = "epoll"
	// ModeNetpoll runs one goroutine per connection on the standard net
	// package: the baseline for comparisons, and the mode of other systems.
	ModeNetpoll = "netpoll"
)

// Defaults filled in by EnsureDefaults.
const (
	DefaultLoginTimeout = 10 * time.Second
	DefaultReadBudget   = 64 << 10 // one read of at most this much per connection per round
	// MaxReadBudget bounds ReadBudget: each loop's read buffer is this plus
	// one frame.
	MaxReadBudget = 16 << 20
	// MaxLoops bounds Loops (a loop's index is 16 bits).
	MaxLoops = 1 << 12
	// MaxShedDelay bounds ShedDelay: a request that waited longer than a
	// minute to be read has been given up on by any client.
	MaxShedDelay = time.Minute
	// MaxChatRate bounds ChatRate: the bucket counts whole nanoseconds per
	// token.
	MaxChatRate = 1e9
)

// Options configures an Ingress. The zero value of every field but Listen
// and Bus is a usable default (see EnsureDefaults).
type Options struct {
	Listen    []string // addresses to listen on, "host:port"; port 0 picks one
	Mode      string   // ModeEpoll (default on Linux) or ModeNetpoll (default elsewhere)
	Loops     int      // event loops (epoll) or counter shards (netpoll); 0: runtime.GOMAXPROCS(0)
	ReusePort bool     // set SO_REUSEPORT, so that several processes can share a port
	MaxConns  int      // connections beyond it are closed at accept (and counted); 0: unlimited

	LoginTimeout time.Duration // a connection must LOGIN within it; 0: DefaultLoginTimeout
	AuthSecret   []byte        // verify LOGIN tokens against it; empty: tokens are ignored

	Bus  *event.Bus // the SETs' rings; nil only when Bare
	Bare bool       // answer every request in the loop itself, no rings (-pipeline=none)
	// NoYield keeps an epoll loop from yielding after a round (see Reading in
	// the package doc): for SET consumers that poll instead of parking
	// (go-disruptor's), which a yield would put the loop behind.
	NoYield bool
	// Handoff keeps an epoll loop from running a SET's stages itself (see
	// Running SETs in the package doc): every publish wakes the SET's
	// goroutine, as it must for SETs whose stages are not fused. For
	// comparison (the server's -handoff).
	Handoff bool
	// NetpollWait parks an epoll loop that has nothing to do in the Go
	// runtime's netpoller (its epoll descriptor is pollable) instead of a
	// raw epoll_wait, which keeps the loop's P while it blocks (park_linux.go).
	NetpollWait bool
	// Redirect, in a cluster, returns the client address of the gateway
	// that runs a SET this one does not (LOGIN_ACK 3); "" when it is not
	// known. nil: every SET of Bus runs here.
	Redirect func(set int) string

	ReadBudget int // bytes read per connection per round; 0: DefaultReadBudget

	// ShedDelay: once requests have waited longer than this to be read,
	// round after round for 2 × ShedDelay, an epoll loop answers the SHAKEs
	// and CHATs that waited longer "overloaded" at once, until no round has
	// for 2 × ShedDelay (see "Shedding by delay" in the package doc). 0:
	// never; netpoll and Bare never shed by delay.
	ShedDelay time.Duration

	// ChatRate and ChatBurst bound the CHATs of each connection: a token
	// bucket of ChatBurst tokens (0: 1) that gains ChatRate a second. A CHAT
	// without a token is answered CHAT_ACK 3 at once and reaches no SET.
	// 0: no limit. Bare mode has none.
	ChatRate  float64
	ChatBurst int

	Logger *slog.Logger // nil: discard
	Now    func() int64 // unix ns; nil: time.Now().UnixNano (tests set it)
}

// EnsureDefaults fills in every zero field that has a default. It is the only
// place defaults are decided.
func (o *Options) EnsureDefaults() {
	if o.Mode == "" {
		o.Mode = defaultMode
	}
	if o.Loops == 0 {
		o.Loops = runtime.GOMAXPROCS(0)
	}
	if o.LoginTimeout == 0 {
		o.LoginTimeout = DefaultLoginTimeout
	}
	if o.ReadBudget == 0 {
		o.ReadBudget = DefaultReadBudget
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixNano() }
	}
}

// Validate reports every bad value, each with its reason. Call it after
// EnsureDefaults (New does both).
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("ingress: "+format, args...)) }
	if len(o.Listen) == 0 {
		bad("no Listen address")
	}
	for i, a := range o.Listen {
		if a == "" {
			bad("Listen[%d] is empty", i)
		}
	}
	if o.Mode != ModeEpoll && o.Mode != ModeNetpoll {
		bad("Mode=%q: want %q or %q", o.Mode, ModeEpoll, ModeNetpoll)
	} else if o.Mode == ModeEpoll && !epollSupported {
		bad("Mode=%q: needs Linux; use %q", o.Mode, ModeNetpoll)
	}
	if o.Loops < 1 || o.Loops > MaxLoops {
		bad("Loops=%d: want 1..%d", o.Loops, MaxLoops)
	}
	if o.MaxConns < 0 {
		bad("MaxConns=%d: want ≥ 0 (0: unlimited)", o.MaxConns)
	}
	if o.LoginTimeout < time.Millisecond {
		bad("LoginTimeout=%v: want ≥ 1ms", o.LoginTimeout)
	}
	if o.ShedDelay < 0 || o.ShedDelay > MaxShedDelay {
		bad("ShedDelay=%v: want 0 (never) or up to %v", o.ShedDelay, MaxShedDelay)
	}
	if !(o.ChatRate >= 0 && o.ChatRate <= MaxChatRate) {
		bad("ChatRate=%v: want 0 (no limit) up to %v CHATs a second", o.ChatRate, float64(MaxChatRate))
	}
	if o.ChatBurst < 0 {
		bad("ChatBurst=%d: want ≥ 0 (0: 1)", o.ChatBurst)
	}
	if o.ReadBudget < 1 || o.ReadBudget > MaxReadBudget {
		bad("ReadBudget=%d: want 1..%d bytes", o.ReadBudget, MaxReadBudget)
	}
	if o.Bus == nil && !o.Bare {
		bad("Bus is nil: only Bare runs without rings")
	}
	if o.Bus != nil && !o.Bare && o.Bus.Sets() == 0 {
		bad("Bus has no SETs")
	}
	if o.Logger == nil || o.Now == nil {
		bad("Logger or Now is nil: call EnsureDefaults first")
	}
	return errors.Join(errs...)
}
