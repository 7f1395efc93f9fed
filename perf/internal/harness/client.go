package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// ClientConfig says how to run the load client against a server.
type ClientConfig struct {
	Bin string // the loadclient binary
	Dir string // gets the report, the timeline and the log
	// Name prefixes the files: "" gives report.json, timeline.csv and
	// loadclient.log; "client-03" gives client-03.report.json, … and
	// client-03.log.
	Name string
	// Servers and Admins, when set, replace the server's address and admin
	// URL: every gateway of a cluster, for a client that fails over.
	Servers, Admins []string
	Users           string   // -users, e.g. "1-2000" (Users(2000))
	Phases          string   // -phases; "" leaves it out
	Flags           []string // more flags, after -phases
	Source          string   // -source; "" leaves it out
	More            string   // more flags, space-separated, last (a tool's -client-flags)
	// Grace is how long the client has after SIGTERM (ctx done) before
	// SIGKILL.
	Grace time.Duration
	// Aligned launches early in a second: the client starts its run on the
	// next whole second after its launch (loadclient's startOf), so that is
	// the second after the launch whatever the exec costs, and Start says
	// which.
	Aligned bool
	// Stdout and Stderr get the client's output besides its log (nil: the
	// log alone).
	Stdout, Stderr io.Writer
	Env            []string                 // added to the environment
	Spawn          func(func() error) error // wraps the fork, as ServerConfig.Spawn
}

// Users is the -users range of users 1..n.
func Users(n int) string { return fmt.Sprintf("1-%d", n) }

// Client is a running load client.
type Client struct {
	Cmd      *exec.Cmd
	Args     []string
	Launched time.Time
	Start    time.Time // with Aligned: the whole second its run starts on
	Report   string    // its -report file
	Timeline string
	Log      string
	done     chan struct{} // closed once it has exited
	err      error         // its exit, set before done is closed
}

// StartClient starts the load client against srv with -admin, -report and
// -timeline in cfg.Dir.
func StartClient(ctx context.Context, srv *Server, cfg ClientConfig) (*Client, error) {
	name := func(file string) string {
		if cfg.Name == "" {
			return filepath.Join(cfg.Dir, file)
		}
		return filepath.Join(cfg.Dir, cfg.Name+"."+file)
	}
	c := &Client{Report: name("report.json"), Timeline: name("timeline.csv"), Log: filepath.Join(cfg.Dir, "loadclient.log"), done: make(chan struct{})}
	if cfg.Name != "" {
		c.Log = filepath.Join(cfg.Dir, cfg.Name+".log")
	}
	servers, admins := cfg.Servers, cfg.Admins
	if len(servers) == 0 {
		servers = []string{srv.Listen}
	}
	if len(admins) == 0 {
		admins = []string{srv.Admin.URL}
	}
	args := []string{"-server", strings.Join(servers, ","), "-users", cfg.Users}
	if cfg.Phases != "" {
		args = append(args, "-phases", cfg.Phases)
	}
	args = append(args, cfg.Flags...)
	if cfg.Source != "" {
		args = append(args, "-source", cfg.Source)
	}
	args = append(args, "-admin", strings.Join(admins, ","), "-report", c.Report, "-timeline", c.Timeline)
	c.Args = append(args, strings.Fields(cfg.More)...)
	log, err := os.Create(c.Log)
	if err != nil {
		return nil, err
	}
	cmd := Command(ctx, cfg.Grace, cfg.Bin, c.Args...)
	cmd.Env = withEnv(cfg.Env)
	cmd.Stdout, cmd.Stderr = log, log
	if cfg.Stdout != nil {
		cmd.Stdout = io.MultiWriter(cfg.Stdout, log)
	}
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(cfg.Stderr, log)
	}
	for frac := time.Duration(time.Now().Nanosecond()); cfg.Aligned && (frac < 50*time.Millisecond || frac > 600*time.Millisecond); frac = time.Duration(time.Now().Nanosecond()) {
		time.Sleep((time.Second + 100*time.Millisecond - frac) % time.Second)
	}
	c.Cmd, c.Launched = cmd, time.Now()
	c.Start = c.Launched.Truncate(time.Second).Add(time.Second)
	if err := spawn(cfg.Spawn, cmd.Start); err != nil {
		log.Close()
		return nil, err
	}
	go func() {
		c.err = cmd.Wait()
		log.Close()
		close(c.done)
	}()
	return c, nil
}

// Done is closed when the client has exited.
func (c *Client) Done() <-chan struct{} { return c.done }

// Wait waits for the client to exit and returns how it exited; it may be
// called any number of times.
func (c *Client) Wait() error {
	<-c.done
	return c.err
}

// Exited says whether the client has exited.
func (c *Client) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Signal sends sig unless the client has exited.
func (c *Client) Signal(sig syscall.Signal) {
	if !c.Exited() {
		c.Cmd.Process.Signal(sig)
	}
}

// PID is the client's process id.
func (c *Client) PID() int { return c.Cmd.Process.Pid }

// CommandLine is the client's command line, to run it by hand.
func (c *Client) CommandLine() string {
	return c.Cmd.Path + " " + strings.Join(c.Args, " ")
}

// ReadReport reads the client's -report file.
func (c *Client) ReadReport() (*loadclient.Report, error) { return ReadReport(c.Report) }

// ReadReport reads a load client's -report file.
func ReadReport(path string) (*loadclient.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the load client's report: %w", err)
	}
	var r loadclient.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the load client's report %s: %w", path, err)
	}
	return &r, nil
}

// ReadTimeline reads a load client's -timeline file.
func ReadTimeline(path string) ([]runlog.Second, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return runlog.ParseTimeline(f)
}

// Reconciled says whether a report holds a passed reconciliation.
func Reconciled(r *loadclient.Report) bool {
	return r != nil && r.Reconcile != nil && r.Reconcile.OK
}
