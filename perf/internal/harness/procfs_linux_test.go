package harness

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
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
	if s, err := ReadSystem(false); err != nil || s.MemTotal <= 0 || s.MemAvailable <= 0 || s.Slab <= 0 || s.TCP == nil {
		t.Errorf("ReadSystem = %+v, %v", s, err)
	}
	if n, err := CountFDs(pid); err != nil || n < 3 {
		t.Errorf("CountFDs(self) = %d, %v; want stdio at least", n, err)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("CPUTime(-1): no error")
	}
}

// TestCPUWait makes more of this process's threads busy in the kernel than
// there are CPUs, so that some wait for one, and checks that the wait shows.
func TestCPUWait(t *testing.T) {
	pid := os.Getpid()
	w0, err := CPUWait(pid)
	if err != nil {
		t.Skipf("no schedstat here: %v", err)
	}
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	// A read of /dev/zero is a memset in the kernel: a goroutine in it holds
	// no P, so 3 × NumCPU of them are that many runnable threads.
	var wg sync.WaitGroup
	end := time.Now().Add(300 * time.Millisecond)
	for range 3 * runtime.NumCPU() {
		wg.Go(func() {
			buf := make([]byte, 4<<20)
			for time.Now().Before(end) {
				syscall.Read(int(zero.Fd()), buf)
			}
		})
	}
	wg.Wait()
	w1, err := CPUWait(pid)
	if err != nil {
		t.Fatal(err)
	}
	if w1 <= w0 {
		t.Errorf("CPUWait did not grow while %d threads shared %d CPUs: %v then %v", 3*runtime.NumCPU(), runtime.NumCPU(), w0, w1)
	}
	if _, err := CPUWait(-1); err == nil {
		t.Error("CPUWait(-1): no error")
	}
}

func TestRunDelay(t *testing.T) {
	d, err := runDelay([]byte("1234567 890123 45\n"))
	if err != nil || d != 890123*time.Nanosecond {
		t.Errorf("runDelay = %v, %v; want 890.123µs", d, err)
	}
	for _, bad := range []string{"", "1 2", "1 x 3", "1 2 3 4"} {
		if _, err := runDelay([]byte(bad)); err == nil {
			t.Errorf("runDelay(%q): no error", bad)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	m := kBLines([]byte("MemTotal:       24684096 kB\nMemAvailable:   24187284 kB\nSlab:             214300 kB\nSUnreclaim:        30188 kB\nHugePages_Total:       0\nbad line\n"))
	want := map[string]int64{"MemTotal": 24684096 << 10, "MemAvailable": 24187284 << 10, "Slab": 214300 << 10, "SUnreclaim": 30188 << 10, "HugePages_Total": 0}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %d; want %d", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("parsed %v; want %v", m, want)
	}
	s := parseSockstat([]byte("sockets: used 13\nTCP: inuse 1 orphan 0 tw 2 alloc 3 mem 8\nUDP: inuse 0 mem 5\n"))
	if s["inuse"] != 1 || s["tw"] != 2 || s["alloc"] != 3 || s["mem"] != 8 || len(s) != 5 {
		t.Errorf("parseSockstat = %v", s)
	}
}
