package main

import (
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// timerSlack is a Spawn hook that runs start, which forks a process, on a
// thread whose timer slack is slack, so that the process inherits it
// (prctl(2): kept across fork and execve, copied to every thread it
// creates); nil for 0. The thread gets its default back before it is
// unlocked.
func timerSlack(slack time.Duration) func(func() error) error {
	if slack <= 0 {
		return nil
	}
	return func(start func() error) error { return withTimerSlack(slack, start) }
}

func withTimerSlack(slack time.Duration, start func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(slack.Nanoseconds()), 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl PR_SET_TIMERSLACK", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // 0: back to the thread's default
	return start()
}
