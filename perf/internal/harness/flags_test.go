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

func TestParseDuration(t *testing.T) {
	f := func(in string, want time.Duration, wantErr bool) {
		t.Helper()
		got, err := ParseDuration(in)
		if (err != nil) != wantErr || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, error %v", in, got, err, want, wantErr)
		}
	}
	f("30", 30*time.Second, false)
	f("30s", 30*time.Second, false)
	f("2m", 2*time.Minute, false)
	f("1500ms", 1500*time.Millisecond, false)
	f("thirty", 0, true)
}
