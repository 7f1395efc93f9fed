package harness

import (
	"os"
	"testing"
)

func TestProcfs(t *testing.T) {
	pid := os.Getpid()
	if rss, err := RSS(pid); err != nil || rss <= 0 {
		t.Errorf("RSS(self) = %d, %v; want > 0", rss, err)
	}
	if _, err := CPUTime(pid); err != nil {
		t.Errorf("CPUTime(self): %v", err)
	}
	if _, err := MachineBusy(); err != nil {
		t.Errorf("MachineBusy: %v", err)
	}
	k, err := ReadKernel()
	if err != nil || k.Slab <= 0 {
		t.Errorf("ReadKernel = %+v, %v; want Slab > 0", k.Slab, err)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("CPUTime(-1): no error")
	}
}
