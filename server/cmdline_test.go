package server_test

import (
	"slices"
	"testing"

	"github.com/hongbao-io/hongbao/server"
)

// TestRedactArgs: /debug/pprof/cmdline shows no secret given as a flag, in
// any of the flag package's spellings.
func TestRedactArgs(t *testing.T) {
	f := func(in, want []string) {
		t.Helper()
		if got := server.RedactArgs(in); !slices.Equal(got, want) {
			t.Errorf("RedactArgs(%q) = %q; want %q", in, got, want)
		}
	}
	f([]string{"server", "-admin-token", "s3cret", "-sets", "8"}, []string{"server", "-admin-token", "REDACTED", "-sets", "8"})
	f([]string{"server", "--admin-token=s3cret"}, []string{"server", "--admin-token=REDACTED"})
	f([]string{"server", "-auth-secret=k", "-auth-secret", "k2"}, []string{"server", "-auth-secret=REDACTED", "-auth-secret", "REDACTED"})
	f([]string{"server", "-read-token", "r", "-read-token-file", "/etc/hongbao/read-token"}, []string{"server", "-read-token", "REDACTED", "-read-token-file", "/etc/hongbao/read-token"})
	f([]string{"server", "-admin-token-file", "/etc/hongbao/token"}, []string{"server", "-admin-token-file", "/etc/hongbao/token"})
	f([]string{"server", "-admin-token"}, []string{"server", "-admin-token"})
	f([]string{"-admin-token"}, []string{"-admin-token"}) // the program's name is never a flag
}
