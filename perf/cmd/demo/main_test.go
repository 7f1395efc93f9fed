package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := parseFlags(fs, strings.Fields(args))
		if len(wantErrs) == 0 && err != nil {
			t.Errorf("parseFlags(%q): %v; want no error", args, err)
		}
		for _, w := range wantErrs {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("parseFlags(%q): %v; want an error with %q", args, err, w)
			}
		}
	}
	f("")
	f("-users 1000 -qps 500 -duration 60")
	f("-users 1 -duration 1s -ingress kqueue -source 10.0.0.1-10.0.0.0", "-users=1", "-duration=1s", "-ingress", "-source")
}
