package loadclient_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/loadclient"
)

// config parses a command line as the binary would.
func config(t *testing.T, args ...string) *loadclient.Config {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := loadclient.ParseFlags(fs, append([]string{"-quiet"}, args...))
	if err != nil {
		t.Fatalf("ParseFlags(%q): %v", args, err)
	}
	return cfg
}

func TestParseFlagsDefaults(t *testing.T) {
	cfg := config(t)
	if cfg.Users != (loadclient.Range{First: 1, Last: 1000}) || cfg.TotalUsers != 1000 || cfg.QPS != loadclient.DefaultQPS ||
		cfg.Duration != loadclient.DefaultDuration || cfg.Loops != runtime.GOMAXPROCS(0) || cfg.Reconcile != "off" ||
		len(cfg.Servers) != 1 || cfg.Servers[0] != loadclient.DefaultServer {
		t.Errorf("defaults: got %+v", cfg)
	}
	cfg = config(t, "-admin", "127.0.0.1:6060", "-phases", "0@10s,300@20s")
	if cfg.Reconcile != "strict" {
		t.Errorf("with -admin: got -reconcile %q; want strict", cfg.Reconcile)
	}
	if cfg = config(t, "-admin", "127.0.0.1:6060", "-reconcile", "at-least"); cfg.Reconcile != loadclient.ReconcileAtLeast {
		t.Errorf("-reconcile at-least: got %q", cfg.Reconcile)
	}
	cfg = config(t, "-admin", "127.0.0.1:6060", "-phases", "0@10s,300@20s")
	if cfg.Duration.Seconds() != 30 {
		t.Errorf("with -phases of 30s: got -duration %v; want the plan's length", cfg.Duration)
	}
}

// TestParseFlagsErrors checks that every bad flag is reported, each by its name.
func TestParseFlagsErrors(t *testing.T) {
	f := func(args []string, want ...string) {
		t.Helper()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := loadclient.ParseFlags(fs, args)
		if err == nil {
			t.Errorf("%q: got no error; want one naming %q", args, want)
			return
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not name %q", args, err, w)
			}
		}
	}
	f([]string{"-users", "5-2"}, "-users")
	f([]string{"-users", "1-10", "-total-users", "5"}, "-total-users")
	f([]string{"-phases", "100@1.5s"}, "-phases")
	f([]string{"-reconcile", "strict"}, "-reconcile", "-admin")
	f([]string{"-reconcile", "maybe"}, "-reconcile")
	f([]string{"-reconcile", "at-least"}, "-reconcile", "-admin")
	f([]string{"-chat-size", "2000", "-send-recipients", "2000", "-loops", "2000"}, "-chat-size", "-send-recipients", "-loops")
	f([]string{"-users", "1-3", "-send-rate", "1", "-send-recipients", "3"}, "-send-recipients")
	f([]string{"-send-total", "2", "-send-recipients", "3"}, "-send-total")
	f([]string{"-server", "nowhere"}, "-server")
	f([]string{"-churn", "-1"}, "-churn")
	f([]string{"-procs", "5", "-users", "1-3"}, "-procs")
	f([]string{"-source", "10.0.0.9-10.0.0.1"}, "source")
	f([]string{"stray"}, "unexpected")
	// 0 where a Config's 0 means the default is an error on the command line.
	f([]string{"-loops", "0"}, "-loops: 0 is not in 1..1024")
	f([]string{"-duration", "0s", "-connect-rate", "0", "-connect-timeout", "0s", "-timeout", "0s", "-grace", "0s"},
		"-duration: 0", "-connect-rate: 0", "-connect-timeout: 0", "-timeout: 0", "-grace: 0")
	f([]string{"-send-recipients", "0", "-chat-size", "0", "-procs", "0"}, "-send-recipients: 0", "-chat-size: 0", "-procs: 0")
	f([]string{"-total-users", "0"}, "-total-users", "0 is not in 1..")
	f([]string{"-send-total", "0"}, "-send-total", "0 is not at least 1 fen")
	f([]string{"-server", ""}, "-server")
	f([]string{"-sched", "fifo"}, "-sched")
	f([]string{"-admin", " , "}, "-admin", "names no URL")
}

// TestHelp checks that -help explains every flag but the internal ones.
func TestHelp(t *testing.T) {
	fs := flag.NewFlagSet("loadclient", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	if _, err := loadclient.ParseFlags(fs, []string{"-help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v; want flag.ErrHelp", err)
	}
	fs.VisitAll(func(fl *flag.Flag) {
		listed := strings.Contains(out.String(), "\n  -"+fl.Name+" ") || strings.Contains(out.String(), "\n  -"+fl.Name+"\n")
		internal := strings.HasPrefix(fl.Usage, "internal")
		if listed == internal {
			t.Errorf("-%s: listed %v; want listed unless internal", fl.Name, listed)
		}
	})
}

func TestParseRange(t *testing.T) {
	f := func(in string, want loadclient.Range, ok bool) {
		t.Helper()
		got, err := loadclient.ParseRange(in)
		if (err == nil) != ok || got != want {
			t.Errorf("ParseRange(%q): got %v, %v; want %v, ok %v", in, got, err, want, ok)
		}
	}
	f("1-1000", loadclient.Range{First: 1, Last: 1000}, true)
	f("7", loadclient.Range{First: 7, Last: 7}, true)
	f("0-5", loadclient.Range{}, false)
	f("5-4", loadclient.Range{}, false)
	f("1-x", loadclient.Range{}, false)
	f("1-4294967296", loadclient.Range{}, false)
}

func TestParseSources(t *testing.T) {
	got, err := loadclient.ParseSources("127.0.0.2-127.0.0.4, ::1,10.0.0.255-10.0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	if want := "127.0.0.2 127.0.0.3 127.0.0.4 ::1 10.0.0.255 10.0.1.0"; strings.Join(s, " ") != want {
		t.Errorf("got %v; want %s", s, want)
	}
	for _, bad := range []string{"127.0.0.5-127.0.0.1", "::1-::2", "300.0.0.1", "1.2.3.4-x"} {
		if _, err := loadclient.ParseSources(bad); err == nil {
			t.Errorf("ParseSources(%q): got no error", bad)
		}
	}
	_ = netip.Addr{}
}

// TestOpenFilesLimit checks that a process refuses more users than its descriptors allow,
// pointing at -procs, before it opens any connection.
func TestOpenFilesLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	cfg := config(t, "-server", "127.0.0.1:1", "-users", "1-4000000", "-duration", "1s")
	_, err := loadclient.Run(context.Background(), cfg, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-procs") {
		t.Errorf("got %v; want a refusal suggesting -procs", err)
	}
}
