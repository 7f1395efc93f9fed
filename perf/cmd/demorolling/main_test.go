package main

import (
	"testing"
	"time"

	"hongbao/perf/internal/flagtest"
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
