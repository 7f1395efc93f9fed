//go:build linux

package loadclient_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// binary builds cmd/loadclient once for the tests that need a process of their own.
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "loadclient-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "loadclient")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/hongbao-io/hongbao/cmd/loadclient")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildOut)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// runBinary runs the binary with args and returns its report; it fails the test if the
// binary runs past limit.
func runBinary(t *testing.T, limit time.Duration, args ...string) (*loadclient.Report, error, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(binary(t), append(args, "-report", report)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	if !timer.Stop() {
		t.Fatalf("binary still running after %v:\n%s", limit, out.String())
	}
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("no report (%v); run: %v\n%s", rerr, err, out.String())
	}
	var r loadclient.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report: %v", err)
	}
	return &r, err, out.String()
}

// TestProcs checks that a -procs 2 parent aggregates its children's counts: the SHAKEs and
// pushes the server saw, one report, a passing reconciliation.
func TestProcs(t *testing.T) {
	fake := newFakeServer(t, 4)
	timeline := filepath.Join(t.TempDir(), "timeline.csv")
	r, err, out := runBinary(t, 30*time.Second, "-server", fake.addr(), "-users", "1-40", "-qps", "200", "-duration", "2s",
		"-procs", "2", "-send-rate", "10", "-admin", fake.admin.URL, "-timeline", timeline)
	t.Logf("output:\n%s", out)
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	fake.mu.Lock()
	shakes, pushed := fake.shakes, len(fake.pushed)
	fake.mu.Unlock()
	if r.Procs != 2 || r.Users != 40 {
		t.Errorf("report of %d procs, %d users; want 2, 40", r.Procs, r.Users)
	}
	if got := r.Requests["SHAKE"].Sent; int64(got) != shakes || got+r.Skipped != 400 {
		t.Errorf("report: %d SHAKEs sent, %d skipped; server saw %d; want sent+skipped = 400", got, r.Skipped, shakes)
	}
	if got := r.Requests["SHAKE"].Latency.Count; got != r.Requests["SHAKE"].Answered {
		t.Errorf("merged SHAKE histogram holds %d latencies; want %d", got, r.Requests["SHAKE"].Answered)
	}
	if got := r.Pushes["ENVELOPE"]; int(got) != pushed || got == 0 {
		t.Errorf("report: %d ENVELOPE pushes; server pushed %d", got, pushed)
	}
	if r.Reconcile == nil || !r.Reconcile.OK {
		t.Errorf("reconcile %+v; want ok", r.Reconcile)
	}
	b, err := os.ReadFile(timeline)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines < 3 {
		t.Errorf("timeline of %d lines; want a header and a row a second:\n%s", lines, b)
	}
}

// TestMemoryPerUser measures the client's heap and stacks per user: the difference between
// 2,000 users and 200, so the process's fixed part (histograms, buffers, runtime) drops out.
func TestMemoryPerUser(t *testing.T) {
	fake := newFakeServer(t, 0)
	mem := func(users string) *loadclient.MemoryReport {
		r, err, out := runBinary(t, 60*time.Second, "-server", fake.addr(), "-users", users, "-qps", "500",
			"-duration", "5s", "-connect-rate", "20000") // time for every user to connect on a busy machine
		if err != nil {
			t.Fatalf("binary: %v\n%s", err, out)
		}
		if r.ConnectionsMax != r.Users {
			t.Fatalf("%d of %d users connected", r.ConnectionsMax, r.Users)
		}
		return r.Memory
	}
	small, big := mem("1-200"), mem("1-2000")
	perUser := float64(int64(big.HeapInuse+big.StackInuse)-int64(small.HeapInuse+small.StackInuse)) / float64(big.Users-small.Users)
	t.Logf("heap+stacks: %d B for 200 users, %d B for 2000: %.0f B per added user (%.0f B/user overall)",
		small.HeapInuse+small.StackInuse, big.HeapInuse+big.StackInuse, perUser, big.PerUser)
	if perUser > 1024 {
		t.Errorf("got %.0f B of heap and stacks per user; want at most 1 KiB", perUser)
	}
}
