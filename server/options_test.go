package server_test

import (
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/server"
)

// TestParseFlags: a value given on the command line is checked as given; 0
// is no way to ask for a default, which comes from leaving the flag out.
func TestParseFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		wantErr string // "" for a valid command line
		check   func(o server.Options) bool
	}{
		{args: nil, check: func(o server.Options) bool {
			return o.Sets == server.DefaultSets && o.Ring == server.DefaultRing && o.Loops == runtime.GOMAXPROCS(0)
		}},
		{args: []string{"-sets", "1", "-ring", "16", "-loops", "1"}, check: func(o server.Options) bool {
			return o.Sets == 1 && o.Ring == 16 && o.Loops == 1
		}},
		{args: []string{"-sets", "0"}, wantErr: "-sets: 0 is not in 1..4096"},
		{args: []string{"-sets", "4097"}, wantErr: "-sets: 4097 is not in 1..4096"},
		{args: []string{"-ring", "0"}, wantErr: "-ring: 0 is not a power of two"},
		{args: []string{"-ring", "100"}, wantErr: "-ring: 100 is not a power of two"},
		{args: []string{"-loops", "0"}, wantErr: "-loops: 0 is not in 1..1024"},
		{args: []string{"-loops", "-1"}, wantErr: "-loops: -1 is not in 1..1024"},
		{args: []string{"-max-pending", "0"}, wantErr: "-max-pending: 0 is below one frame"},
		{args: []string{"-trace-slow", "-1ms"}, wantErr: "-trace-slow: -1ms is negative"},
		{args: []string{"-trace-slow", "1ms", "-pipeline", "none"}, wantErr: "-trace-slow: needs a pipeline"},
	} {
		fs := flag.NewFlagSet("server", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o, err := server.ParseFlags(fs, c.args)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%q: %v; want no error", c.args, err)
		case c.wantErr == "" && !c.check(o):
			t.Errorf("%q: Sets %d, Ring %d, Loops %d: not what was asked for", c.args, o.Sets, o.Ring, o.Loops)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%q: error %v; want one containing %q", c.args, err, c.wantErr)
		}
	}
}

// TestParseFlagsEveryProblem: one error names every bad flag at once.
func TestParseFlagsEveryProblem(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	_, err := server.ParseFlags(fs, []string{"-sets", "0", "-ring", "0", "-loops", "0"})
	for _, flag := range []string{"-sets:", "-ring:", "-loops:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("error %v; want it to name %s", err, flag)
		}
	}
}
