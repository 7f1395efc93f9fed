package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"hongbao/perf/internal/harness"
)

// crashRun is one run: its directory under -out, the -data directory its
// servers share, the report it prints and keeps for report.md, and the
// checks that failed.
type crashRun struct {
	w      io.Writer
	lines  []string
	dir    string
	path   func(name string) string
	data   string
	errs   []error
	checks []summaryCheck // every check, in order
}

func newRun(out, prefix string, w io.Writer) (*crashRun, error) {
	dir, path, err := harness.RunDir(out, prefix)
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp("", "hongbao-crash-")
	if err != nil {
		return nil, err
	}
	return &crashRun{w: w, dir: dir, path: path, data: data}, nil
}

// close writes report.md and removes the -data directory: after the
// servers have gone.
func (r *crashRun) close() {
	os.WriteFile(r.path("report.md"), []byte("```\n"+strings.Join(r.lines, "\n")+"\n```\n"), 0o644)
	os.RemoveAll(r.data)
}

func (r *crashRun) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Fprintln(r.w, s)
	r.lines = append(r.lines, s)
}

// check reports one check, ok or FAILED, with what it measured.
func (r *crashRun) check(name string, ok bool, format string, args ...any) {
	verdict := "ok"
	if !ok {
		verdict = "FAILED"
		r.errs = append(r.errs, errors.New(name))
	}
	r.checks = append(r.checks, summaryCheck{name, ok})
	r.printf("  %-44s %-6s %s", name, verdict, fmt.Sprintf(format, args...))
}

// start starts the first server, its log in server-1.log.
func (r *crashRun) start(ctx context.Context, cfg config, args []string, echo io.Writer) (*harness.Server, error) {
	srv, err := harness.Start(ctx, harness.ServerConfig{Bin: filepath.Join(cfg.Bin, "server"), Args: args, Log: r.path("server-1.log"), Echo: echo})
	if err != nil {
		return nil, err
	}
	r.printf("server: %s", srv.CommandLine())
	return srv, nil
}

// restart starts the server again with the same flags, its log in log
// (server-2.log, …), and returns how long it took to serve and its
// "recovered" line.
func (r *crashRun) restart(ctx context.Context, cfg config, args []string, log string, timeout time.Duration, echo io.Writer) (*harness.Server, time.Duration, recovered, error) {
	t0 := time.Now()
	srv, err := harness.Start(ctx, harness.ServerConfig{Bin: filepath.Join(cfg.Bin, "server"), Args: args, Log: r.path(log), Echo: echo, StartTimeout: timeout})
	if err != nil {
		return nil, 0, recovered{}, fmt.Errorf("restart: %w", err)
	}
	took := time.Since(t0)
	rec, err := recoveredLine(r.path(log))
	if err != nil {
		srv.Kill()
		return nil, 0, rec, err
	}
	return srv, took, rec, nil
}

// finish stops the restarted server with SIGTERM, checks that it exits 0,
// and gives the verdict.
func (r *crashRun) finish(srv *harness.Server, timeout time.Duration, name string) error {
	code, err := srv.Stop(timeout)
	r.check("SIGTERM → exit 0", err == nil, "exit status %d", code)
	if err := errors.Join(r.errs...); err != nil {
		return err
	}
	r.printf("%s: PASS", name)
	return nil
}
