package harness

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestRunningThreads: a process counts its threads running until SIGSTOP
// has stopped every one, and none after.
func TestRunningThreads(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if n, err := runningThreads(cmd.Process.Pid); err != nil || n != 1 {
		t.Fatalf("before SIGSTOP: %d running, %v; want 1", n, err)
	}
	s := &Server{PID: cmd.Process.Pid, cmd: cmd}
	if err := s.Pause(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, _ := runningThreads(cmd.Process.Pid); n != 0 {
		t.Fatalf("after Pause: %d running; want 0", n)
	}
	s.Signal(syscall.SIGCONT)
}
