//go:build linux

package loadclient

import (
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// Gateways: in a cluster a LOGIN to a gateway that does not own the user answers LOGIN_ACK 3
// with the address of the one that does. The user connects there until that connection fails.
// A loop keeps the addresses it was sent to in a small table and each connection one byte,
// uconn.gw, its index in it: 0 is a -server address (serverOf).

// maxGateways bounds a loop's table: uconn.gw is a uint8 and 0 is the default.
const maxGateways = 255

// Connect failure kinds of a LOGIN_ACK 3 that names no usable gateway.
const (
	kindOwnerUnknown  = "wrong gateway, owner unknown"
	kindGatewaysFull  = "wrong gateway, too many gateways"
	kindOtherFamily   = "wrong gateway, other address family"
	redirectRefusedBy = "LOGIN redirected by"
)

// gateway is one address LOGIN_ACK 3 sent users of the loop to.
type gateway struct {
	text   string // as the server wrote it: looked up without parsing again
	addr   netip.AddrPort
	sa     unix.Sockaddr // this loop's own: unix.Connect writes into it
	family int
}

// target returns the address c connects to and its socket family.
func (l *loop) target(c *uconn) (unix.Sockaddr, int) {
	if c.gw != 0 {
		g := &l.gws[c.gw-1]
		return g.sa, g.family
	}
	return l.servers[l.serverOf(c)], l.family
}

// targetAddr returns the address c connects to, for notes.
func (l *loop) targetAddr(c *uconn) netip.AddrPort {
	if c.gw != 0 {
		return l.gws[c.gw-1].addr
	}
	return l.plan.servers[l.serverOf(c)]
}

// serverOf returns the index of the -server address c connects to with gw 0: its own,
// (user−1) mod count, moved on by srv after failures.
func (l *loop) serverOf(c *uconn) int {
	n := uint32(len(l.servers))
	return int(((c.user-1)%n + uint32(c.srv)%n) % n)
}

// gatewayOf returns the table index of the gateway at addr, adding it when new, or 0 and
// why when addr is empty, not an ip:port, of the other address family than -server (which
// -source and the engine keep to one), or the table is full.
func (l *loop) gatewayOf(addr []byte) (gw uint8, kind, why string) {
	if len(addr) == 0 {
		return 0, kindOwnerUnknown, "no address: the owner is not known now"
	}
	for i := range l.gws {
		if l.gws[i].text == string(addr) {
			return uint8(i + 1), "", ""
		}
	}
	ap, err := netip.ParseAddrPort(string(addr))
	if err != nil || ap.Port() == 0 {
		return 0, kindOwnerUnknown, "address " + strconv.Quote(string(addr)) + " is not ip:port"
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	family := unix.AF_INET
	if ap.Addr().Is6() {
		family = unix.AF_INET6
	}
	if family != l.family {
		return 0, kindOtherFamily, "address " + string(addr) + " is not of the -server address family"
	}
	if len(l.gws) == maxGateways {
		return 0, kindGatewaysFull, "no room for " + string(addr) + " beside " + strconv.Itoa(maxGateways) + " gateways"
	}
	l.gws = append(l.gws, gateway{text: string(addr), addr: ap, sa: sockaddr(ap.Addr(), int(ap.Port())), family: family})
	return uint8(len(l.gws)), "", ""
}

// redirect follows a LOGIN_ACK 3: c closes and connects to the gateway at addr, at once when
// it came from a -server address, after the backoff when a gateway it was sent to sent it
// on (so that two gateways sending a user to each other cannot spin). An empty address (no
// owner yet, as while a SET fails over) or an unusable one is a connect failure: c retries
// after the backoff elsewhere (nextServer).
func (l *loop) redirect(c *uconn, idx uint32, addr []byte) {
	gw, kind, why := l.gatewayOf(addr)
	if gw == 0 {
		if len(addr) == 0 {
			l.c.NoOwner++
		}
		l.connectFailed(c, kind, redirectRefusedBy, why)
		l.closeConn(c, &l.c.Lost)
		l.setState(c, stIdle)
		l.nextServer(c)
		l.c.Errors[errConnect]++
		l.retry(c, idx)
		return
	}
	l.c.Redirected++
	from := c.gw
	l.closeConn(c, &l.c.Lost)
	l.setState(c, stIdle)
	c.gw = gw
	if from != 0 {
		l.retry(c, idx)
		return
	}
	if l.now < l.endNs || l.opens.has(idx) || l.resend.has(idx) {
		l.dial(c, idx)
	}
}
