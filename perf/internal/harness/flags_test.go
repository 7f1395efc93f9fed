package harness

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestSetFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("users", 1, "")
	fs.Duration("ramp", time.Second, "")
	fs.Bool("gc", true, "")
	fs.String("server-flags", "", "")
	fs.String("unset", "x", "")
	if err := ParseArgs(fs, []string{"-users", "5", "-gc=false", "-server-flags", `-a "b" $c`, "-ramp=2s"}); err != nil {
		t.Fatal(err)
	}
	if got, want := SetFlags(fs), `-gc=false -ramp 2s -server-flags "-a \"b\" \$c" -users 5`; got != want {
		t.Fatalf("SetFlags = %s; want %s", got, want)
	}
	for in, want := range map[string]string{"": `""`, "127.0.0.2-127.0.0.20": "127.0.0.2-127.0.0.20", "a b": `"a b"`, "it's": `"it's"`} {
		if got := ShellQuote(in); got != want {
			t.Fatalf("ShellQuote(%q) = %s; want %s", in, got, want)
		}
	}
}
