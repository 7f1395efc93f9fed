package loadclient

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// policies returns the scheduling policy of every thread of this process.
func policies(t *testing.T) map[string]int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/self/task/*/stat")
	m := map[string]int{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		// Fields after the command's closing parenthesis; policy is field 41 of stat(5).
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		n, _ := strconv.Atoi(f[41-3])
		m[filepath.Base(filepath.Dir(p))] = n
	}
	return m
}

// TestSetSched: every thread there is, and every thread made afterwards, has
// the policy set; and normal sets them back.
func TestSetSched(t *testing.T) {
	defer setSched(SchedNormal)
	for _, c := range []struct {
		policy string
		want   int
	}{{SchedBatch, unix.SCHED_BATCH}, {SchedNormal, unix.SCHED_NORMAL}} {
		if err := setSched(c.policy); err != nil {
			t.Fatal(err)
		}
		// A goroutine locked to its thread while others are too makes the
		// runtime start new threads, cloned after setSched.
		const locked = 4
		hold, ready := make(chan struct{}), make(chan struct{})
		for range locked {
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				ready <- struct{}{}
				<-hold
			}()
		}
		for range locked {
			<-ready
		}
		got := policies(t)
		close(hold)
		if len(got) < locked {
			t.Fatalf("%d threads; want at least %d", len(got), locked)
		}
		for tid, p := range got {
			if p != c.want {
				t.Errorf("%s: thread %s has policy %d; want %d", c.policy, tid, p, c.want)
			}
		}
	}
}
