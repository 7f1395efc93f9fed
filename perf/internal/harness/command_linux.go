package harness

import "syscall"

// sysProcAttr makes the kernel kill a child when the tool that started it
// dies, however it dies: a perf run never leaves a process behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
