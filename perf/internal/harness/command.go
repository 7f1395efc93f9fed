package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/hongbao-io/hongbao/internal/ports"
)

// Command is exec.CommandContext for a child that must not outlive the
// tool: when ctx is done it gets SIGTERM (the load client then ends its run
// early and reports), and SIGKILL grace later; on Linux it also dies with
// the tool.
func Command(ctx context.Context, grace time.Duration, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = grace
	return cmd
}

// withEnv returns the environment with env added: later entries win, so
// env overrides what this process has.
func withEnv(env []string) []string {
	if len(env) == 0 {
		return nil // inherit
	}
	return append(os.Environ(), env...)
}

// spawn runs start through wrap (a tool's hook around fork, e.g. a timer
// slack the child inherits), or as it is.
func spawn(wrap func(func() error) error, start func() error) error {
	if wrap == nil {
		return start()
	}
	return wrap(start)
}

// FreePorts returns n distinct loopback addresses whose ports nothing
// listened on a moment ago, for the load clients' -control: all are held
// until the last is found.
func FreePorts(n int) ([]string, error) {
	ps, err := ports.Free(n)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out, nil
}

// Poll calls try every interval until it returns nil or timeout has
// passed, and returns its last error.
func Poll(timeout, every time.Duration, try func() error) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(every) {
		if err := try(); err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
