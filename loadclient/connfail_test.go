//go:build linux

package loadclient_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// TestConnectRefusedReason checks that a run against a port nobody listens on says why its
// connects failed: ECONNREFUSED, as many as the connect errors, with the first refusal's
// text, in the report, its JSON and the summary.
func TestConnectRefusedReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	path := filepath.Join(t.TempDir(), "report.json")
	cfg := config(t, "-server", addr, "-users", "1-5", "-qps", "10", "-duration", "1s", "-grace", "100ms", "-report", path)
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatal("Run: got no error; want connect errors")
	}
	if want := "connect failures mostly ECONNREFUSED ×"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "connect "+addr+": connection refused") {
		t.Errorf("Run: %v; want it to say %q and quote the first refusal", err, want)
	}
	cf := r.ConnectFailures
	if len(cf.Kinds) != 1 || cf.Kinds[0].Kind != "ECONNREFUSED" {
		t.Fatalf("connect failures %+v; want ECONNREFUSED only", cf)
	}
	k := cf.Kinds[0]
	if k.Count != r.Errors["connect"] || cf.Total != k.Count || k.Count < 5 || k.Count >= 1000 {
		t.Errorf("ECONNREFUSED ×%d, total %d; want the %d connect errors, at least one per user (and under 1,000: no digit groups)", k.Count, cf.Total, r.Errors["connect"])
	}
	if want := "connect " + addr + ": connection refused"; k.First != want {
		t.Errorf("first refusal %q; want %q", k.First, want)
	}
	if k.FirstAtS < -2 || k.FirstAtS > 1 {
		t.Errorf("first refusal at %.3f s; want within the run's first second (or just before its start)", k.FirstAtS)
	}

	var summary strings.Builder
	r.WriteSummary(&summary)
	if want := fmt.Sprintf("connect failures: %d (ECONNREFUSED ×", cf.Total); !strings.Contains(summary.String(), want) {
		t.Errorf("summary does not say %q:\n%s", want, summary.String())
	}
	if !strings.Contains(summary.String(), `first "connect `+addr+`: connection refused" at `) {
		t.Errorf("summary does not quote the first refusal:\n%s", summary.String())
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ConnectFailures struct {
			Total uint64
			Kinds []struct{ Kind, First string }
		} `json:"connect_failures"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ConnectFailures.Total != cf.Total || len(doc.ConnectFailures.Kinds) != 1 ||
		doc.ConnectFailures.Kinds[0].Kind != "ECONNREFUSED" || doc.ConnectFailures.Kinds[0].First != k.First {
		t.Errorf("JSON connect_failures %+v; want the report's %+v", doc.ConnectFailures, cf)
	}
}

// TestLoginRefusedReason checks that a LOGIN refused counts as a connect failure of kind
// "LOGIN status N", once per user (a refused user does not reconnect), and that a run
// against a working server reports no connect failure at all.
func TestLoginRefusedReason(t *testing.T) {
	t.Parallel() // it waits on the servers and the clock, not on the CPU
	fake := newFakeServer(t, 0)
	fake.mu.Lock()
	fake.loginStatus = proto.LoginBadToken
	fake.mu.Unlock()
	cfg := config(t, "-server", fake.addr(), "-users", "1-6", "-qps", "10", "-duration", "1s", "-grace", "100ms", "-loops", "2")
	r, err, _ := run(t, cfg, 20*time.Second)
	if err == nil {
		t.Fatal("Run: got no error; want the refused logins")
	}
	cf := r.ConnectFailures
	if len(cf.Kinds) != 1 || cf.Kinds[0].Kind != "LOGIN status 1" || cf.Kinds[0].Count != 6 || cf.Total != 6 {
		t.Fatalf("connect failures %+v; want LOGIN status 1 ×6, one per user", cf)
	}
	if want := "LOGIN refused by " + fake.addr() + ": LOGIN status 1"; cf.Kinds[0].First != want {
		t.Errorf("first refusal %q; want %q", cf.Kinds[0].First, want)
	}

	ok := newFakeServer(t, 0)
	cfg = config(t, "-server", ok.addr(), "-users", "1-6", "-qps", "10", "-duration", "1s")
	r, err, _ = run(t, cfg, 20*time.Second)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var summary strings.Builder
	r.WriteSummary(&summary)
	if r.ConnectFailures.Total != 0 || len(r.ConnectFailures.Kinds) != 0 || strings.Contains(summary.String(), "connect failures") {
		t.Errorf("connect failures %+v, summary:\n%s\nwant none", r.ConnectFailures, summary.String())
	}
}
