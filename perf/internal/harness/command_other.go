//go:build !linux

package harness

import "syscall"

// sysProcAttr: without Pdeathsig, Stop and Kill in the tool's defers are
// the only cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
