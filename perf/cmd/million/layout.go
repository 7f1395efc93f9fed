package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/hongbao-io/hongbao/loadclient"
)

// part is one server and its load client: its users and its shares of the
// rates.
type part struct {
	index                            int
	users                            loadclient.Range
	connectRate, shakeRate, sendRate int
	sources                          []netip.Addr
}

// splitEven cuts n into k whole shares that differ by at most one, the larger
// first.
func splitEven(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// autoSources is two loopback addresses per load client from 127.0.0.2.
func autoSources(clients int) ([]netip.Addr, error) {
	if clients > 250*128 {
		return nil, fmt.Errorf("%d load clients: too many for auto -source", clients)
	}
	out := []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 2})}
	for len(out) < 2*clients {
		out = append(out, out[len(out)-1].Next())
	}
	return out, nil
}

// planParts lays users 1..conns out over k servers in contiguous ranges,
// every rate split exactly. Load client i gets every k-th source address
// from i when there are at least k (disjoint sets), else the (i mod len)th.
func planParts(conns, k, rampRate, shakeRate, sendRate int, sources []netip.Addr) []part {
	sizes, ramp := splitEven(conns, k), splitEven(rampRate, k)
	shake, send := splitEven(shakeRate, k), splitEven(sendRate, k)
	parts := make([]part, k)
	first := uint32(1)
	for i := range parts {
		p := part{index: i, users: loadclient.Range{First: first, Last: first + uint32(sizes[i]) - 1},
			connectRate: max(1, ramp[i]), shakeRate: shake[i], sendRate: send[i]}
		if len(sources) > 0 && len(sources) < k {
			p.sources = []netip.Addr{sources[i%len(sources)]}
		}
		for j := i; len(sources) >= k && j < len(sources); j += k {
			p.sources = append(p.sources, sources[j])
		}
		parts[i] = p
		first += uint32(sizes[i])
	}
	return parts
}

// portsNeeded is the most connections one (source address, server port)
// pair carries: each needs a local port of net.ipv4.ip_local_port_range.
func portsNeeded(parts []part) int {
	most := 0
	for _, p := range parts {
		most = max(most, (p.users.Len()+max(len(p.sources), 1)-1)/max(len(p.sources), 1))
	}
	return most
}

// joinAddrs writes addresses as a -source list.
func joinAddrs(a []netip.Addr, sep string) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, sep)
}

// addrSpan writes addresses for a person: all of a few, else first … last.
func addrSpan(a []netip.Addr) string {
	switch {
	case len(a) == 0:
		return "the kernel's choice"
	case len(a) <= 4:
		return joinAddrs(a, ", ")
	}
	return fmt.Sprintf("%v … %v (%d)", a[0], a[len(a)-1], len(a))
}
