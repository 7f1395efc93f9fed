//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withNoFile returns a script that runs bin with the open-files limit (soft
// and hard) at n, so that the server meets it with a handful of clients.
func withNoFile(t *testing.T, bin string, n int) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "server-nofile")
	body := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 3\nexec %q \"$@\"\n", n, bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestAdminAtFileLimit: idle clients connect until the server refuses them;
// /metrics and /stats still answer, from the descriptors kept in reserve.
func TestAdminAtFileLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	const limit, conns = 200, 250 // the server admits limit − its reserve (64)
	srv := startServer(t, withNoFile(t, buildServer(t), limit), "-login-timeout", "1m")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.DialTimeout("tcp", srv.listen, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", len(held), err)
		}
		held = append(held, c)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) string {
		resp, err := hc.Get("http://" + srv.admin + path)
		if err != nil {
			t.Fatalf("GET %s with %d clients at the open-files limit %d: %v", path, conns, limit, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		return string(body)
	}
	var metrics string
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(metrics, "hongbao_refused_total") || strings.Contains(metrics, "hongbao_refused_total 0\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no connection refused with %d clients and an open-files limit of %d:\n%s", conns, limit, metrics)
		}
		metrics = get("/metrics")
	}
	stats := get("/stats")
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "hongbao_refused_total") || strings.HasPrefix(line, "hongbao_connections") {
			t.Log(line)
		}
	}
	if !strings.Contains(stats, `"connections": 136`) {
		t.Errorf("/stats %s; want 136 connections (the limit %d less 64 in reserve)", stats, limit)
	}
}

// TestSIGTERMDuringProfile: a 30 s CPU profile in flight at SIGTERM does not
// hold the shutdown: the server exits 0 within -shutdown-timeout.
func TestSIGTERMDuringProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	const timeout = 3 * time.Second
	srv := startServer(t, buildServer(t), "-shutdown-timeout", timeout.String())
	profiling := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + srv.admin + "/debug/pprof/profile?seconds=30")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		profiling <- err
	}()
	// The profile has begun once the runtime's profile writer runs.
	for deadline := time.Now().Add(10 * time.Second); !profileRunning(srv.admin); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no CPU profile running 10 s after GET /debug/pprof/profile; log:\n%s", srv.logText())
		}
	}
	sigAt := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(timeout + 10*time.Second):
		srv.kill()
		t.Fatalf("server still running %v after SIGTERM; log:\n%s", time.Since(sigAt), srv.logText())
	}
	took := time.Since(sigAt)
	code := srv.cmd.ProcessState.ExitCode()
	t.Logf("SIGTERM during a CPU profile: exit %d in %v (-shutdown-timeout %v); the profile's request: %v",
		code, took.Round(time.Millisecond), timeout, <-profiling)
	if code != 0 || took > timeout {
		t.Errorf("exit status %d after %v; want 0 within %v. Log:\n%s", code, took, timeout, srv.logText())
	}
}

// profileRunning reports whether the server at admin writes a CPU profile:
// its goroutines include the runtime's profile writer.
func profileRunning(admin string) bool {
	resp, err := http.Get("http://" + admin + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return err == nil && bytes.Contains(b, []byte("runtime/pprof.profileWriter"))
}
