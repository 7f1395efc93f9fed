package main

import (
	"testing"
	"time"

	"hongbao/perf/internal/flagtest"
)

func TestParseDuration(t *testing.T) {
	f := func(in string, want time.Duration, wantErr bool) {
		t.Helper()
		got, err := parseDuration(in)
		if (err != nil) != wantErr || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", in, got, err, want, wantErr)
		}
	}
	f("30", 30*time.Second, false)
	f("30s", 30*time.Second, false)
	f("2m", 2*time.Minute, false)
	f("thirty", 0, true)
}

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) {
		t.Helper()
		flagtest.Parse(t, "demo", parseFlags, args, wantErrs...)
	}
	f("")
	f("-users 1000 -qps 500 -duration 60")
	f("-users 1 -duration 1s -ingress kqueue -source 10.0.0.1-10.0.0.0", "-users=1", "-duration=1s", "-ingress", "-source")
}
