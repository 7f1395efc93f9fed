package main

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "democluster", parseFlags, args, wantErrs...)
	}
	c := f("")
	if c.mode != "demo" || c.gateways != 3 || c.users != 30000 || c.qps != 20000 || c.duration != 30*time.Second || procs(c.users) != 2 {
		t.Errorf("defaults: %+v, %d load-client processes", c, procs(c.users))
	}
	f("-users 3000 -qps 2000 -duration 8 -ramp 4 -gateways 2 -sets 4")
	if c := f("-mode cpu"); c.users != 5000 || c.qps != 5000 {
		t.Errorf("-mode cpu: %d users, %d SHAKE/s per process; want 5000, 5000", c.users, c.qps)
	}
	if c := f("-mode open"); c.duration != 15*time.Second {
		t.Errorf("-mode open: duration %v; want 15s", c.duration)
	}
	f("-mode cpu -users 30000", "-users=30000")
	f("-mode bench -gateways 1 -sets 0 -duration 1s -ramp 0s", "-mode", "-gateways=1", "-sets=0", "-duration=1s", "-ramp=0s")
	f("-source 10.0.0.1 -server-flags -listen=:1", "-source", "-server-flags")
	f("-cluster-timeout 0s -open-rate 0", "-cluster-timeout", "-open-rate")
	if c := f("-mode open -open-rounds 5"); c.openRounds != 5 {
		t.Errorf("-open-rounds 5: %d", c.openRounds)
	}
	f("-mode open -open-rounds 0", "-open-rounds=0")
	f("-mode open -duration 10s -open-rounds 20", "-open-rounds=20")
	f("-users 90000", "-users=90000")
	f("extra", "unexpected arguments")
}
