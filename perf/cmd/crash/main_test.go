package main

import (
	"testing"
	"time"

	"hongbao/perf/internal/flagtest"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "crash", parseFlags, args, wantErrs...)
	}
	if c := f(""); c.scale || c.killAfter != 10*time.Second || c.scalePool != 10_000_000 || c.scaleGroups != 1_000_000 {
		t.Errorf("defaults: %+v", c)
	}
	if c := f("-scale -scale-pool 1000 -scale-groups 100"); !c.scale || c.scalePool != 1000 || c.scaleGroups != 100 {
		t.Errorf("-scale: %+v", c)
	}
	f("-users 500 -qps 1000 -send-rate 0 -kill-after 5s -server-flags -sets=8")
	f("-kill-after 1s -qps 0 -probes 0 -scale-pool 0 -scale-timeout 1s -server-flags -admin=x -source 10.0.0.1",
		"-kill-after=1s", "-qps=0", "-probes=0", "-scale-pool=0", "-scale-timeout=1s", "-server-flags", "-source")
	f("extra", "unexpected arguments")
}
