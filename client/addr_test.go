package client

import (
	"testing"
	"time"
)

// TestNextAddrPassesOverFailed: the gateways that failed are asked again
// only once every other has failed since — however long ago they failed —
// and then the one that failed longest ago first; one that answers a LOGIN
// is in turn again.
func TestNextAddrPassesOverFailed(t *testing.T) {
	c := &Client{addrs: []string{"a", "b", "c"}, o: options{dialTimeout: time.Second}}
	c.shun("a")
	c.failed["a"] = time.Now().Add(-time.Hour) // long ago: still passed over while b and c serve
	for i, want := range []string{"b", "c", "b", "c"} {
		if got := c.nextAddr(); got != want {
			t.Fatalf("pick %d: %s; want %s", i, got, want)
		}
	}
	if !c.isShunned("b") && c.isShunned("a") {
		t.Fatal("a failed an hour ago: redirects to it are followed again")
	}
	c.shun("b")
	c.shun("c")
	if got := c.nextAddr(); got != "a" {
		t.Fatalf("every gateway failed: %s; want a, which failed longest ago", got)
	}
	c.answered("b")
	if got, again := c.nextAddr(), c.nextAddr(); got != "b" || again != "b" {
		t.Fatalf("b answered again: %s, %s; want b, b", got, again)
	}
	if !c.isShunned("c") {
		t.Fatal("c just failed: a redirect to it is followed")
	}
}
