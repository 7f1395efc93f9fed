package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func parse(args ...string) (config, error) {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlags(fs, args)
}

func TestDefaults(t *testing.T) {
	c, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.plan(), "0@20s,30000@60s,30000@30s,60000@30s"; got != want {
		t.Fatalf("plan = %q; want %q", got, want)
	}
	if l := c.length().Seconds(); l != 140 {
		t.Fatalf("length = %vs; want 140s (a default run within 3 minutes)", l)
	}
	ph := c.phases()
	if len(ph) != 4 || ph[1].From != 20 || ph[1].To != 80 || ph[3].QPS != 60000 {
		t.Fatalf("phases = %+v", ph)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	f := func(wantErr string, args ...string) {
		t.Helper()
		_, err := parse(args...)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("parse(%q): err %v; want one containing %q", args, err, wantErr)
		}
	}
	f("-users=1", "-users", "1")
	f("open-files limit", "-users", "1000000")
	f("-steady=10s: the captures need 30s", "-steady", "10s")
	f("-ramp=1.5s: want whole seconds", "-ramp", "1500ms")
	f("-server-flags: -admin=x is perf's", "-server-flags", "-sets 8 -admin=x")
	f("-source", "-source", "nonsense")
	f("unexpected arguments", "extra")
}

func TestShortFunc(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := shortFunc(in); got != want {
			t.Fatalf("shortFunc(%q) = %q; want %q", in, got, want)
		}
	}
	f("runtime.futex", "runtime.futex")
	f("github.com/hongbao-io/hongbao/ring.(*Stage[go.shape.struct { Out [32]uint8 }]).run", "github.com/hongbao-io/hongbao/ring.(*Stage[…]).run")
	f("a.F[x].G[y]", "a.F[…].G[…]")
}

// The report's "This run" line names every flag the command line set.
func TestThisRun(t *testing.T) {
	c, err := parse("-users", "2000", "-settle", "1s", "-cpu-profile", "1s", "-trace", "1s", "-steady", "8s", "-out", "/tmp/x",
		"-server-flags", "-sets 8 -wait yield", "-client-flags=-loops 1", "-source", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	want := "This run: `make perf PERFFLAGS='-client-flags \"-loops 1\" -cpu-profile 1s -out /tmp/x -server-flags \"-sets 8 -wait yield\" -settle 1s -source 127.0.0.2 -steady 8s -trace 1s -users 2000'`"
	if got := thisRun(&c); !strings.HasPrefix(got, want) {
		t.Fatalf("thisRun =\n%s\nwant it to start\n%s", got, want)
	}
	c, _ = parse()
	if got := thisRun(&c); !strings.Contains(got, "`make perf`") {
		t.Fatalf("thisRun of the defaults = %s", got)
	}
}
