package harness

import "syscall"

// sysProcAttr makes the kernel kill the server when the tool that started it
// dies, however it dies: a perf run never leaves a server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
