package main

import (
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is a Spawn hook that forks the process on a thread whose timer
// slack is slack, which the process inherits (prctl(2): kept across fork
// and execve, copied to every thread); nil for 0.
func timerSlack(slack time.Duration) func(func() error) error {
	if slack <= 0 {
		return nil
	}
	return func(start func() error) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack.Nanoseconds()), 0, 0, 0); err != nil {
			return os.NewSyscallError("prctl PR_SET_TIMERSLACK", err)
		}
		defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // 0: back to the thread's default
		return start()
	}
}
