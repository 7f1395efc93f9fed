package main

import (
	"net/netip"
	"testing"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
)

func TestSplitEven(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{200, 56}, {1000000, 56}, {60000, 56}, {10000, 56}, {7, 7}, {3, 5}, {0, 4}} {
		parts := splitEven(tc.n, tc.k)
		sum, lo, hi := 0, parts[0], parts[0]
		for i, p := range parts {
			sum += p
			lo, hi = min(lo, p), max(hi, p)
			if i > 0 && p > parts[i-1] {
				t.Errorf("splitEven(%d, %d) = %v: not the larger first", tc.n, tc.k, parts)
			}
		}
		if sum != tc.n || hi-lo > 1 || len(parts) != tc.k {
			t.Errorf("splitEven(%d, %d) = %v: sum %d, spread %d", tc.n, tc.k, parts, sum, hi-lo)
		}
	}
	if got := splitEven(200, 56); got[0] != 4 || got[31] != 4 || got[32] != 3 || got[55] != 3 {
		t.Errorf("splitEven(200, 56) = %v; want 32 × 4 then 24 × 3", got)
	}
}

func TestPlanParts(t *testing.T) {
	src, err := autoSources(56)
	if err != nil {
		t.Fatal(err)
	}
	if len(src) != 112 || src[0] != netip.MustParseAddr("127.0.0.2") || src[111] != netip.MustParseAddr("127.0.0.113") {
		t.Fatalf("autoSources(56): %d addresses %v … %v", len(src), src[0], src[len(src)-1])
	}
	parts := planParts(1000000, 56, 10000, 200, 200, src)
	next := uint32(1)
	var shake, send, ramp int
	seen := map[netip.Addr]int{}
	for i, p := range parts {
		if p.index != i || p.users.First != next {
			t.Fatalf("part %d: index %d, users %v; want from %d", i, p.index, p.users, next)
		}
		if n := p.users.Len(); n != 17857 && n != 17858 {
			t.Errorf("part %d: %d users", i, n)
		}
		if len(p.sources) != 2 {
			t.Errorf("part %d: sources %v; want 2", i, p.sources)
		}
		for _, a := range p.sources {
			if j, dup := seen[a]; dup {
				t.Errorf("source %v dealt to parts %d and %d", a, j, i)
			}
			seen[a] = i
		}
		next = p.users.Last + 1
		shake += p.shakeRate
		send += p.sendRate
		ramp += p.connectRate
	}
	if next != 1000001 || shake != 200 || send != 200 || ramp != 10000 {
		t.Errorf("users to %d, shake %d/s, send %d/s, ramp %d/s; want 1000000, 200, 200, 10000", next-1, shake, send, ramp)
	}
	if got := portsNeeded(parts); got != 8929 {
		t.Errorf("portsNeeded = %d; want 8929 (17858 users over 2 sources)", got)
	}
	// Fewer sources than clients: each client one, shared round-robin.
	parts = planParts(100, 4, 4, 0, 0, src[:3])
	if len(parts[3].sources) != 1 || parts[3].sources[0] != src[0] || portsNeeded(parts) != 25 {
		t.Errorf("3 sources over 4 clients: client 3 has %v, ports needed %d", parts[3].sources, portsNeeded(parts))
	}
	if parts = planParts(100, 2, 2, 0, 0, nil); parts[0].sources != nil || portsNeeded(parts) != 50 {
		t.Errorf("no sources: %v, %d", parts[0].sources, portsNeeded(parts))
	}
}

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "million", parseFlags, args, wantErrs...)
	}
	if c := f(""); c.servers != 56 || c.conns != 1000000 || c.rampTimeout.Seconds() != 560 {
		t.Errorf("defaults: %d servers, %d conns, ramp timeout %v; want 56, 1000000, 9m20s", c.servers, c.conns, c.rampTimeout)
	}
	if c := f("-conns 20000 -servers 2"); c.servers != 2 {
		t.Errorf("-servers 2: got %d", c.servers)
	}
	f("-conns 10 -servers 8 -duration 2500ms -source 10.0.0.1 -client-flags=-qps=5", "-conns=10", "-duration", "not an IPv4 loopback", "million's")
}
