// Package harness is the scenario every perf tool runs, written once: start
// servers (or a cluster of gateways) on loopback ports of the kernel's
// choosing, bring users up with the load client or connections of the
// tool's own, start campaigns, sample the server (/metrics, /proc), stop,
// reconcile the ledger and write the report and commands.txt.
//
// Every process it starts is bounded: Stop sends SIGTERM and kills after a
// timeout, and on Linux a child also gets SIGKILL when the tool that
// started it dies (Pdeathsig), so an interrupted tool leaves nothing behind.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/perf/internal/runlog"
)

// ServerConfig says how to start a server.
type ServerConfig struct {
	Bin  string   // the server binary (bin/server)
	Args []string // more flags; Start sets -listen, -admin and -log-format itself, and -data unless given
	Log  string   // file that gets the server's log; "" discards it
	// Echo gets the server's WARN and ERROR lines as they come (nil: none),
	// so that a tool's output shows what went wrong on the server side.
	Echo io.Writer
	// StartTimeout bounds the wait for the "serving" line (default 10 s).
	StartTimeout time.Duration
	Env          []string                 // added to the environment (GOMAXPROCS=2, GODEBUG=gctrace=1)
	Spawn        func(func() error) error // wraps the fork (a timer slack the child inherits); nil: none
}

// Server is a running server process. Its methods are safe for concurrent use.
type Server struct {
	PID    int
	Listen string // the client address, host:port
	Admin  *Admin
	Log    string // the file that gets its log

	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and its log is flushed
	waitErr error         // set before done is closed
	stopped sync.Once
}

// serving is the part of the server's "serving" log line that Start reads.
type serving struct {
	Msg    string `json:"msg"`
	Admin  string `json:"admin"`
	Listen []struct {
		IP   string
		Port int
	} `json:"listen"`
}

// Start starts the server on 127.0.0.1 with kernel-chosen ports for -listen
// and -admin (no port can be taken by someone else between a check and the
// bind) and waits for its "serving" log line, which names the ports.
func Start(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	args := append([]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-log-format", "json"}, cfg.Args...)
	// Each measured server starts from an empty journal of its own, removed
	// once it exits: a run must not inherit the money of the one before.
	var data string
	if !slices.Contains(cfg.Args, "-data") {
		var err error
		if data, err = os.MkdirTemp("", "hongbao-data-"); err != nil {
			return nil, err
		}
		args = append(args, "-data", data)
	}
	cmd := exec.Command(cfg.Bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Env = withEnv(cfg.Env)
	var logw io.Writer = io.Discard
	var logf *os.File
	if cfg.Log != "" {
		f, err := os.Create(cfg.Log)
		if err != nil {
			return nil, err
		}
		logf, logw = f, f
	}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = pw
	cleanup := func() {
		if logf != nil {
			logf.Close()
		}
		os.RemoveAll(data) // "" is nothing
	}
	if err := spawn(cfg.Spawn, cmd.Start); err != nil {
		cleanup()
		return nil, fmt.Errorf("cannot start %s: %w", cfg.Bin, err)
	}
	s := &Server{PID: cmd.Process.Pid, Log: cfg.Log, cmd: cmd, done: make(chan struct{})}
	ready := make(chan serving, 1)
	scanned := make(chan struct{})
	go func() { // copy the log, find the serving line, echo warnings
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Bytes()
			logw.Write(line)
			logw.Write([]byte{'\n'})
			if !found {
				var sv serving
				if json.Unmarshal(line, &sv) == nil && sv.Msg == "serving" {
					found = true
					ready <- sv
				}
			}
			if cfg.Echo != nil && (bytes.Contains(line, []byte(`"level":"WARN"`)) || bytes.Contains(line, []byte(`"level":"ERROR"`)) || !bytes.HasPrefix(line, []byte("{"))) {
				fmt.Fprintf(cfg.Echo, "server: %s\n", line)
			}
		}
		io.Copy(io.Discard, pr) // a line over 1 MiB: keep the pipe flowing
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned
		cleanup()
		s.waitErr = err
		close(s.done)
	}()
	t := time.NewTimer(cfg.StartTimeout)
	defer t.Stop()
	select {
	case sv := <-ready:
		if len(sv.Listen) == 0 || sv.Admin == "" {
			s.Kill()
			return nil, fmt.Errorf("server's serving line names no addresses (-admin off?)")
		}
		s.Listen = net.JoinHostPort(sv.Listen[0].IP, strconv.Itoa(sv.Listen[0].Port))
		s.Admin = NewAdmin(sv.Admin)
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("server exited before serving (%v); see %s", s.waitErr, orNone(cfg.Log))
	case <-t.C:
		s.Kill()
		return nil, fmt.Errorf("server not serving after %v; see %s", cfg.StartTimeout, orNone(cfg.Log))
	case <-ctx.Done():
		s.Kill()
		return nil, ctx.Err()
	}
}

func orNone(log string) string {
	if log == "" {
		return "(no log kept)"
	}
	return log
}

// CommandLine is the server's start as a shell line: the binary with the
// flags Start gave it, in the background, its output to the log file, and
// as a comment the addresses the kernel chose and the pid.
func (s *Server) CommandLine() string {
	log := s.Log
	if log == "" {
		log = os.DevNull
	}
	return fmt.Sprintf("%s %s >%s 2>&1 &   # serving %s, admin %s, pid %d",
		s.cmd.Path, strings.Join(s.cmd.Args[1:], " "), log, s.Listen, s.Admin.URL, s.PID)
}

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop sends SIGTERM and waits up to timeout for the process to exit, then
// kills it. It returns the exit code (-1 when killed by a signal) and an
// error when the server did not exit 0 by itself. Only the first call of
// Stop or Kill acts; later ones wait and report the same exit.
func (s *Server) Stop(timeout time.Duration) (code int, err error) {
	s.stopped.Do(func() {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.cmd.Process.Kill()
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			s.cmd.Process.Kill()
		}
	})
	<-s.done
	code = s.cmd.ProcessState.ExitCode()
	if code != 0 {
		return code, fmt.Errorf("server pid %d: %v after SIGTERM", s.PID, s.cmd.ProcessState)
	}
	return 0, nil
}

// Signal sends sig to the process (SIGSTOP, SIGCONT: a stalled machine).
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Pause stops the process (SIGSTOP) and returns once every one of its
// threads is stopped, within timeout: kill(2) returns before they are, and
// a thread busy on a loaded machine runs on for a while.
func (s *Server) Pause(timeout time.Duration) error {
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
		running, err := runningThreads(s.PID)
		if err == nil && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads not stopped %v after SIGSTOP (%v)", s.PID, running, timeout, err)
		}
	}
}

// Wait waits up to timeout for the process to exit by itself and returns
// its exit code (-1: killed by a signal); ok is false if it still runs.
func (s *Server) Wait(timeout time.Duration) (code int, ok bool) {
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Kill kills the process unless Stop or Kill already ran, and waits for it:
// the deferred cleanup of a tool that failed half-way.
func (s *Server) Kill() {
	s.stopped.Do(func() { s.cmd.Process.Kill() })
	<-s.done
}

// LogLine decodes into v the last line of the JSON log at path whose msg
// is msg ("recovered", "stopped"), and fails when there is none.
func LogLine(path, msg string, v any) error {
	var last []byte
	if err := ScanLog(path, msg, func(_ time.Time, line []byte) {
		var l struct{ Msg string }
		if json.Unmarshal(line, &l) == nil && l.Msg == msg { // not a longer msg
			last = append(last[:0], line...)
		}
	}); err != nil {
		return err
	}
	if last == nil {
		return fmt.Errorf("%s has no %q line", path, msg)
	}
	return json.Unmarshal(last, v)
}

// ScanLog calls fn with each line of the JSON log at path whose msg
// starts with prefix.
func ScanLog(path, prefix string, fn func(time.Time, []byte)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasPrefix(l.Msg, prefix) {
			fn(l.Time, sc.Bytes())
		}
	}
	return sc.Err()
}

// LogDuration reads a slog duration: nanoseconds, or a Go duration string.
func LogDuration(b json.RawMessage) time.Duration {
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		return time.Duration(n)
	}
	var s string
	json.Unmarshal(b, &s)
	d, _ := time.ParseDuration(s)
	return d
}

// MaxMedian are the largest and the median of v (0, 0 for none).
func MaxMedian(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	v = slices.Clone(v)
	med := runlog.MedianOf(v) // sorts v
	return v[len(v)-1], med
}
