package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// RunDir creates out/<prefix><time>/ for a run's files and returns it with
// a function that names a file in it.
func RunDir(out, prefix string) (dir string, path func(name string) string, err error) {
	dir = filepath.Join(out, prefix+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	return dir, func(name string) string { return filepath.Join(dir, name) }, nil
}

// ClientConfig says how to run the load client against a server.
type ClientConfig struct {
	Bin    string   // the loadclient binary
	Dir    string   // gets report.json, timeline.csv and loadclient.log
	Users  int      // -users 1-Users
	Phases string   // -phases
	Flags  []string // more flags, after -phases
	Source string   // -source
	More   string   // more flags, space-separated, last (a tool's -client-flags)
	// Grace is how long the client has after SIGTERM (ctx done) before
	// SIGKILL.
	Grace time.Duration
	// Stdout and Stderr get the client's output besides loadclient.log
	// (nil: the log alone).
	Stdout, Stderr io.Writer
}

// Client is a running load client.
type Client struct {
	Cmd      *exec.Cmd
	Args     []string
	Launched time.Time
	Start    time.Time      // the whole second its run starts on
	Done     chan error     // gets Wait's result, once
	log      io.WriteCloser // loadclient.log, closed once it exits
}

// StartClient starts the load client against srv with -admin, -report and
// -timeline in cfg.Dir. It launches early in a second: the client starts
// its run on the next whole second after its launch (loadclient's startOf),
// so that is the second after the launch whatever the exec costs, and
// Start says which.
func StartClient(ctx context.Context, srv *Server, cfg ClientConfig) (*Client, error) {
	path := func(name string) string { return filepath.Join(cfg.Dir, name) }
	args := append([]string{"-server", srv.Listen, "-users", fmt.Sprintf("1-%d", cfg.Users), "-phases", cfg.Phases}, cfg.Flags...)
	args = append(args, "-source", cfg.Source, "-admin", srv.Admin.URL, "-report", path("report.json"), "-timeline", path("timeline.csv"))
	args = append(args, strings.Fields(cfg.More)...)
	log, err := os.Create(path("loadclient.log"))
	if err != nil {
		return nil, err
	}
	cmd := Command(ctx, cfg.Grace, cfg.Bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if cfg.Stdout != nil {
		cmd.Stdout = io.MultiWriter(cfg.Stdout, log)
	}
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(cfg.Stderr, log)
	}
	for frac := time.Duration(time.Now().Nanosecond()); frac < 50*time.Millisecond || frac > 600*time.Millisecond; frac = time.Duration(time.Now().Nanosecond()) {
		time.Sleep((time.Second + 100*time.Millisecond - frac) % time.Second)
	}
	c := &Client{Cmd: cmd, Args: args, Launched: time.Now(), log: log}
	c.Start = c.Launched.Truncate(time.Second).Add(time.Second)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	done := make(chan error, 1)
	c.Done = done
	go func() {
		err := cmd.Wait()
		log.Close()
		done <- err
	}()
	return c, nil
}

// CommandLine is the client's command line, to run it by hand.
func (c *Client) CommandLine() string {
	return c.Cmd.Path + " " + strings.Join(c.Args, " ")
}
