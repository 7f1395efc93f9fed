// Package flagtest checks a perf tool's command-line parsing in its tests.
package flagtest

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// Parse runs parse, a tool's parseFlags, on args split at blanks with a
// quiet flag set named name, and fails t unless the error contains every
// one of wantErrs (no error when there are none). It returns the config.
func Parse[C any](t testing.TB, name string, parse func(*flag.FlagSet, []string) (C, error), args string, wantErrs ...string) C {
	t.Helper()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c, err := parse(fs, strings.Fields(args))
	if len(wantErrs) == 0 && err != nil {
		t.Errorf("parseFlags(%q): %v; want no error", args, err)
	}
	for _, w := range wantErrs {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("parseFlags(%q): %v; want an error with %q", args, err, w)
		}
	}
	return c
}
