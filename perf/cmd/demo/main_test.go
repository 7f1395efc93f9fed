package main

import (
	"testing"

	"github.com/hongbao-io/hongbao/perf/internal/flagtest"
)

func TestParseFlags(t *testing.T) {
	f := func(args string, wantErrs ...string) {
		t.Helper()
		flagtest.Parse(t, "demo", parseFlags, args, wantErrs...)
	}
	f("")
	f("-users 1000 -qps 500 -duration 60")
	f("-users 1 -duration 1s -ingress kqueue -source 10.0.0.1-10.0.0.0", "-users=1", "-duration=1s", "-ingress", "-source")
}
