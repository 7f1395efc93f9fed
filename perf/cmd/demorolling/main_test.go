package main

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "demorolling", parseFlags, args, wantErrs...)
	}
	c := f("")
	if c.Sets != 12 || c.Replicas != 3 || c.Users != 3000 || c.QPS != 3000 || c.Lease != 1500*time.Millisecond || c.rebalance != 300*time.Millisecond {
		t.Errorf("defaults: %+v", c)
	}
	if d := c.Ramp + c.load(); d < 2*time.Minute || d > 3*time.Minute {
		t.Errorf("the default run's load lasts %v: want every step's slot, about 2.5 minutes", d)
	}
	if c := f("-slot 10s -lead 2s"); c.load() != 2*time.Second+time.Duration(len(steps))*10*time.Second+5*time.Second {
		t.Errorf("-slot 10s -lead 2s: load %v", c.load())
	}
	f("-sets 3", "-sets=3")
	f("-replicas 4", "-replicas=4")
	f("-lease 100ms", "-lease=100ms")
	f("-slot 5s", "-slot=5s")
	f("-ramp 0s -lead 1s", "-ramp=0s")
	f("-qps -1 -send-rate -2", "-qps=-1", "-send-rate=-2")
	f("-send-campaign-rate 0", "-send-campaign-rate=0")
	f("extra", "unexpected arguments")
}

// TestWindow: a step's p99 is the worst of the seconds it touches, one
// shorter than a second included.
func TestWindow(t *testing.T) {
	tl := []runlog.Second{{T: 114, P99: 50 * time.Millisecond}, {T: 115, P99: 70 * time.Millisecond, Overload: 2},
		{T: 116, P99: 90 * time.Millisecond, Overload: 1}, {T: 117, P99: 200 * time.Millisecond}}
	if p99, refused := window(tl, 115.2, 115.9); p99 != 90 || refused != 3 {
		t.Errorf("a step from 115.2 s to 115.9 s: p99 %v ms, %d refused; want 90 ms and 3, its seconds 115 and 116", p99, refused)
	}
}
