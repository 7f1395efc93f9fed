package loadclient

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// publishEvery is how often a loop publishes its figures: how stale the live ones may be.
const publishEvery = 100 * time.Millisecond

// runPlan is a validated Config resolved for one process: addresses looked up, times fixed.
// It is read-only once built and shared by the loops.
type runPlan struct {
	cfg      *Config
	servers  []netip.AddrPort
	sources  []netip.Addr // of the servers' family
	local    Range        // the users this process connects
	startNs  int64        // the run's start: the plan's first change, Unix ns
	endNs    int64        // the loops send nothing due at or after it
	changes  []RateChange // the initial rate plan
	secret   []byte
	chatText []byte
	history  *historyFile // -history; nil without
}

// newRunPlan resolves cfg for a process that starts the run at startNs.
func newRunPlan(cfg *Config, startNs int64) (*runPlan, error) {
	p := &runPlan{cfg: cfg, local: cfg.local, startNs: startNs, endNs: startNs + int64(cfg.Duration)}
	for _, s := range cfg.Servers {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			return nil, fmt.Errorf("-server: cannot resolve %q: %w", s, err)
		}
		ap := a.AddrPort()
		p.servers = append(p.servers, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	v4 := p.servers[0].Addr().Is4()
	for _, s := range p.servers {
		if s.Addr().Is4() != v4 {
			return nil, fmt.Errorf("-server: mixes IPv4 and IPv6 addresses")
		}
	}
	for _, a := range cfg.Sources {
		if a.Unmap().Is4() != v4 {
			return nil, fmt.Errorf("-source: %v is not of the servers' address family", a)
		}
		p.sources = append(p.sources, a.Unmap())
	}
	if cfg.Phases != "" {
		plan, err := ParsePlan(cfg.Phases, startNs)
		if err != nil {
			return nil, fmt.Errorf("-phases: %w", err)
		}
		p.changes = plan
	} else {
		p.changes = []RateChange{{QPS: cfg.QPS, AtNs: startNs}}
	}
	if cfg.AuthSecret != "" {
		p.secret = []byte(cfg.AuthSecret)
	}
	p.chatText = []byte(strings.Repeat("x", cfg.ChatSize))
	return p, nil
}

// engine is one process's event loops. Only the goroutine that runs the process calls it.
type engine interface {
	// setRate changes the total rate to qps from the first whole second at or after atNs,
	// in every loop (Schedule.SetRate).
	setRate(qps uint32, atNs int64)
	// endNow makes the loops stop sending now rather than at the end of the run.
	endNow()
	// hold makes the loops stop opening pushes; each publishes its counters at once, with
	// Holding 1. It returns how many loops it told.
	hold() int
	// settle makes the loops send no OPEN again and connect nobody more: the drain is over,
	// and the opens still under way stay unresolved.
	settle()
	// poll adds the loops' last published counters to total and their latencies recorded
	// since the last poll to live.
	poll(total *counters, live *LatencyHistogram)
	// stop closes every connection, counting what is still in flight as unanswered, waits
	// for the loops to return and hands over their figures.
	stop() *loadResult
}

// loadResult is what the loops of a process measured over the whole run.
type loadResult struct {
	counters counters
	hists    [nHist]*LatencyHistogram
	err      error // a loop that failed (epoll)
}

func newLoadResult() *loadResult {
	r := &loadResult{}
	for i := range r.hists {
		r.hists[i] = new(LatencyHistogram)
	}
	return r
}

// splitRange cuts r into k contiguous parts whose sizes differ by at most one.
func splitRange(r Range, k int) []Range {
	n := r.Len()
	k = min(k, n)
	out := make([]Range, 0, k)
	first := r.First
	for i := range k {
		size := uint32(n / k)
		if i < n%k {
			size++
		}
		out = append(out, Range{first, first + size - 1})
		first += size
	}
	return out
}
