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
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
	if policy == SchedBatch {
		attr.Policy = unix.SCHED_BATCH
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
			// ESRCH: the thread has exited since the listing.
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && err != unix.ESRCH {
				return fmt.Errorf("-sched %s: sched_setattr: %w", policy, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
}
