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

// statField returns field n (numbered from 1, as in proc(5)) of a thread's
// stat file, or an error if the thread is gone.
func statField(path string, n int) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// Fields 3 on follow the command's closing parenthesis.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	return strconv.Atoi(f[n-3])
}

// policies returns the scheduling policy of every thread of this process.
func policies(t *testing.T) map[string]int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/self/task/*/stat")
	m := map[string]int{}
	for _, p := range stats {
		if policy, err := statField(p, 41); err == nil { // else the thread exited
			m[filepath.Base(filepath.Dir(p))] = policy
		}
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

// TestSetSchedKeepsNice: a thread's nice value is its own and stays: only the
// policy changes (putting it back to 0 would need privileges).
func TestSetSchedKeepsNice(t *testing.T) {
	defer setSched(SchedNormal)
	type result struct {
		nice, policy int
		err          error
	}
	done := make(chan result)
	go func() {
		// Locked and never unlocked: the thread, niced, ends with the goroutine.
		runtime.LockOSThread()
		tid := unix.Gettid()
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 7); err != nil {
			done <- result{err: err}
			return
		}
		err := setSched(SchedBatch)
		stat := "/proc/self/task/" + strconv.Itoa(tid) + "/stat"
		nice, _ := statField(stat, 19)
		policy, _ := statField(stat, 41)
		done <- result{nice, policy, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.nice != 7 || r.policy != unix.SCHED_BATCH {
		t.Errorf("nice %d, policy %d; want nice 7 kept and policy %d", r.nice, r.policy, unix.SCHED_BATCH)
	}
}
