package main

import (
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) config {
		t.Helper()
		return flagtest.Parse(t, "crash", parseFlags, args, wantErrs...)
	}
	if c := f(""); c.scale || c.single || c.crashes != 5 || c.duration != 90*time.Second || c.seed != 1 ||
		c.users != 19000 || c.qps != 30000 || c.killAfter != 10*time.Second || c.scalePool != 10_000_000 || c.scaleGroups != 1_000_000 {
		t.Errorf("defaults: %+v", c)
	}
	if c := f("-single"); !c.single || c.users != 2000 || c.qps != 2000 {
		t.Errorf("-single: %+v; want 2,000 users at 2,000 SHAKE/s", c)
	}
	if c := f("-single -users 500 -qps 900"); c.users != 500 || c.qps != 900 {
		t.Errorf("-single -users 500 -qps 900: %+v", c)
	}
	if c := f("-crashes 3 -duration 60s -seed 7"); c.crashes != 3 || c.duration != time.Minute || c.seed != 7 {
		t.Errorf("-crashes 3 -duration 60s -seed 7: %+v", c)
	}
	if c := f("-scale -scale-pool 1000 -scale-groups 100"); !c.scale || c.scalePool != 1000 || c.scaleGroups != 100 {
		t.Errorf("-scale: %+v", c)
	}
	f("-users 500 -qps 1000 -send-rate 0 -kill-after 5s -server-flags -sets=8")
	f("-kill-after 1s -qps 0 -probes 0 -scale-pool 0 -scale-timeout 1s -server-flags -admin=x -source 10.0.0.1",
		"-kill-after=1s", "-qps=0", "-probes=0", "-scale-pool=0", "-scale-timeout=1s", "-server-flags", "-source")
	f("-crashes 0", "-crashes=0")
	f("-crashes 10 -duration 60s", "-duration=1m0s, -crashes=10", "-duration ≥ 1m45s")
	f("extra", "unexpected arguments")
}

// TestCrashMoments checks that the kills fall in order within the load,
// after its lead and before its tail, apart, and the same for the same seed.
func TestCrashMoments(t *testing.T) {
	for seed := range uint64(50) {
		at := crashMoments(90*time.Second, 5, seed)
		if len(at) != 5 || at[0] < crashLead || at[4] > 90*time.Second-crashTail {
			t.Fatalf("seed %d: %v; want 5 within [%v, %v]", seed, at, crashLead, 90*time.Second-crashTail)
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap < crashSlot(90*time.Second, 5)*2/5 {
				t.Errorf("seed %d: %v: crashes %d and %d only %v apart", seed, at, i, i+1, gap)
			}
		}
		if again := crashMoments(90*time.Second, 5, seed); again[2] != at[2] {
			t.Errorf("seed %d: %v, then %v", seed, at, again)
		}
	}
}
