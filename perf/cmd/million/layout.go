package main

import (
	"fmt"
	"net/netip"
	"strings"

	"hongbao/loadclient"
)

// part is one server and its load client: the users it holds and its shares
// of the rates.
type part struct {
	index       int
	users       loadclient.Range
	connectRate int // the load client's -connect-rate
	shakeRate   int // the server's shake campaign, envelopes a second (0: none)
	sendRate    int // the server's send campaign (0: none)
	sources     []netip.Addr
}

// splitEven cuts n into k whole shares that differ by at most one, the larger
// first; they add up to n exactly.
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
	n := 2 * clients
	if n > 250*256 {
		return nil, fmt.Errorf("%d load clients: too many for auto -source", clients)
	}
	out := make([]netip.Addr, 0, n)
	a := netip.AddrFrom4([4]byte{127, 0, 0, 2})
	for range n {
		out = append(out, a)
		a = a.Next()
	}
	return out, nil
}

// dealSources gives load client i of k its addresses: every k-th from i when
// there are at least k (disjoint sets), else the (i mod len)th alone.
func dealSources(src []netip.Addr, i, k int) []netip.Addr {
	if len(src) == 0 {
		return nil
	}
	if len(src) < k {
		return []netip.Addr{src[i%len(src)]}
	}
	var out []netip.Addr
	for j := i; j < len(src); j += k {
		out = append(out, src[j])
	}
	return out
}

// planParts lays users 1..conns out over k servers: contiguous ranges whose
// sizes differ by at most one, and every rate split exactly.
func planParts(conns, k, rampRate, shakeRate, sendRate int, sources []netip.Addr) []part {
	sizes := splitEven(conns, k)
	ramp := splitEven(rampRate, k)
	shake := splitEven(shakeRate, k)
	send := splitEven(sendRate, k)
	parts := make([]part, k)
	first := uint32(1)
	for i := range parts {
		parts[i] = part{
			index:       i,
			users:       loadclient.Range{First: first, Last: first + uint32(sizes[i]) - 1},
			connectRate: max(1, ramp[i]),
			shakeRate:   shake[i],
			sendRate:    send[i],
			sources:     dealSources(sources, i, k),
		}
		first += uint32(sizes[i])
	}
	return parts
}

// portsNeeded returns the most connections one (source address, server
// port) pair carries: each needs its own local port from
// net.ipv4.ip_local_port_range.
func portsNeeded(parts []part) int {
	most := 0
	for _, p := range parts {
		n := p.users.Len()
		if len(p.sources) > 0 {
			n = (n + len(p.sources) - 1) / len(p.sources)
		}
		most = max(most, n)
	}
	return most
}

// joinAddrs writes addresses as a -source list.
func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// addrSpan writes a list of addresses short: first–last (count).
func addrSpan(a []netip.Addr) string {
	switch len(a) {
	case 0:
		return "the kernel's choice"
	case 1:
		return a[0].String()
	}
	return fmt.Sprintf("%v … %v (%d)", a[0], a[len(a)-1], len(a))
}
