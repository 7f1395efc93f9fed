package harness

import (
	"context"
	"os/exec"
	"syscall"
	"time"
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
