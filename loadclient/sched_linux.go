package loadclient

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setSched gives every thread of this process the scheduling policy named
// (SchedBatch or SchedNormal). The kernel sets a policy per thread, and a
// thread the Go runtime makes later inherits its creator's: so every thread
// there is now is set, again until a pass finds none it has not set (one
// cloned meanwhile from a thread not yet set would have the old policy).
func setSched(policy string) error {
	want := uint32(unix.SCHED_NORMAL)
	if policy == SchedBatch {
		want = unix.SCHED_BATCH
	}
	done := map[int]bool{}
	for {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("-sched: %w", err)
		}
		fresh := false
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			// The thread's attributes but the policy stay (its nice value:
			// lowering it would need privileges). ESRCH: the thread has
			// exited since the listing.
			attr, err := unix.SchedGetAttr(tid, 0)
			if err == nil {
				attr.Policy = want
				err = unix.SchedSetAttr(tid, attr, 0)
			}
			if err != nil && err != unix.ESRCH {
				return fmt.Errorf("-sched %s: %w", policy, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
}
