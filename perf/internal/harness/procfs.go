package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc: USER_HZ, 100 on every
// Linux architecture that Go supports.
const userHZ = 100

// RSS returns the resident set of process pid in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if v, ok := kBLines(b)["VmRSS"]; ok || err != nil {
		return v, err
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// kBLines reads the "Name: N [kB]" lines of /proc/meminfo or
// /proc/PID/status, kB turned into bytes.
func kBLines(b []byte) map[string]int64 {
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		name, rest, _ := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			if len(f) == 2 && f[1] == "kB" {
				v <<= 10
			}
			m[name] = v
		}
	}
	return m
}

// afterComm returns the fields of a /proc/PID/stat line after "pid (comm)":
// comm may hold spaces and parentheses, so they start after the last ')'.
func afterComm(b []byte) []string {
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// CPUTime returns the user and system CPU time process pid has used
// (utime + stime of /proc/PID/stat), all threads together.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := afterComm(b) // state is its 1st field, utime and stime its 12th and 13th
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after comm", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: cannot parse utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// CPUWait returns how long the threads of process pid alive now have
// waited, runnable, for a CPU (run_delay of /proc/PID/task/*/schedstat):
// what a machine short of CPU costs a process, which its CPU time does not
// show. Its growth over a window ÷ the window is how many of the process's
// threads waited on average.
func CPUWait(pid int) (time.Duration, error) {
	var sum time.Duration
	read := 0
	err := eachThread(pid, "schedstat", func(b []byte) error {
		d, err := runDelay(b)
		sum += d
		read++
		return err
	})
	if err == nil && read == 0 {
		err = fmt.Errorf("/proc/%d/task: no thread's schedstat could be read (a kernel without CONFIG_SCHED_INFO?)", pid)
	}
	return sum, err
}

// runDelay parses a schedstat line, "time on a CPU, time runnable and
// waiting for one (both ns), timeslices", into its wait.
func runDelay(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("want 3 fields, got %q", b)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err
}

// runningThreads counts pid's threads not stopped (state T).
func runningThreads(pid int) (int, error) {
	running := 0
	err := eachThread(pid, "stat", func(b []byte) error {
		if f := afterComm(b); len(f) == 0 || f[0] != "T" {
			running++
		}
		return nil
	})
	return running, err
}

// eachThread calls f with the contents of file for every thread of process
// pid (/proc/PID/task/*/file); a thread that ended meanwhile, or whose file
// the kernel does not keep, is passed over.
func eachThread(pid int, file string, f func([]byte) error) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), file))
		if err != nil {
			continue
		}
		if err := f(b); err != nil {
			return fmt.Errorf("%s/%s/%s: %w", dir, t.Name(), file, err)
		}
	}
	return err
}

// SelfCPUTime returns the user and system CPU time of this process.
func SelfCPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MachineBusy returns the CPU time all CPUs spent busy (user, nice, system,
// irq, softirq of /proc/stat), to tell what other processes took during a
// measurement.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy time.Duration
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d %q: %w", i, f[i], err)
		}
		busy += time.Duration(v) * time.Second / userHZ
	}
	return busy, nil
}

// System is the machine at one moment: /proc/meminfo, the TCP line of
// /proc/net/sockstat, the connection tracker's count, the CPUs' busy time
// and the slab caches (readable by root only; nil otherwise).
type System struct {
	At           time.Time
	MemTotal     int64 // bytes
	MemAvailable int64
	Slab         int64
	SReclaimable int64
	SUnreclaim   int64
	TCP          map[string]int64 // inuse, orphan, tw, alloc, mem (pages)
	Conntrack    int64            // -1: no connection tracker
	Busy         time.Duration    // MachineBusy
	Caches       map[string]int64 // slab cache → bytes (num_objs × objsize); with slabinfo only
}

// ReadSystem reads the machine now; with slabinfo also /proc/slabinfo,
// which is slow on a machine with a million sockets.
func ReadSystem(slabinfo bool) (System, error) {
	s := System{At: time.Now(), Conntrack: -1}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return s, err
	}
	m := kBLines(b)
	for name, p := range map[string]*int64{"MemTotal": &s.MemTotal, "MemAvailable": &s.MemAvailable, "Slab": &s.Slab,
		"SReclaimable": &s.SReclaimable, "SUnreclaim": &s.SUnreclaim} {
		v, ok := m[name]
		if !ok {
			return s, fmt.Errorf("/proc/meminfo: no %s", name)
		}
		*p = v
	}
	if b, err = os.ReadFile("/proc/net/sockstat"); err != nil {
		return s, err
	}
	s.TCP = parseSockstat(b)
	if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count"); err == nil {
		s.Conntrack, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	s.Busy, _ = MachineBusy()
	if slabinfo {
		s.Caches = readSlabinfo()
	}
	return s, nil
}

// parseSockstat reads the "TCP:" line of /proc/net/sockstat: inuse, orphan,
// tw, alloc and mem (pages).
func parseSockstat(b []byte) map[string]int64 {
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "TCP:"); ok {
			f := strings.Fields(rest)
			for i := 0; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
					m[f[i]] = v
				}
			}
		}
	}
	return m
}

// readSlabinfo returns each slab cache's size, or nil when /proc/slabinfo
// cannot be read.
func readSlabinfo() map[string]int64 {
	b, err := os.ReadFile("/proc/slabinfo")
	if err != nil {
		return nil
	}
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line) // name active_objs num_objs objsize …
		if len(f) < 4 || strings.HasPrefix(f[0], "#") || f[0] == "slabinfo" {
			continue
		}
		n, err1 := strconv.ParseInt(f[2], 10, 64)
		size, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			m[f[0]] += n * size
		}
	}
	return m
}

// CountFDs counts the open descriptors of process pid.
func CountFDs(pid int) (int64, error) {
	names, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return int64(len(names)), err
}

// CacheGrowth is one slab cache's growth between two readings.
type CacheGrowth struct {
	Name  string
	Bytes int64
}

// TopCaches returns the n slab caches that grew most from a to b.
func TopCaches(a, b System, n int) []CacheGrowth {
	var out []CacheGrowth
	for name, v := range b.Caches {
		if d := v - a.Caches[name]; d > 0 {
			out = append(out, CacheGrowth{name, d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out[:min(n, len(out))]
}

// SocketCaches are the slab caches a TCP socket and its descriptor live in:
// the socket (TCP), its inode, its struct file, and an epoll registration.
// Their dentries share the dentry cache with everything else, /proc's
// included, so they are left out.
var SocketCaches = []string{"TCP", "sock_inode_cache", "filp", "eventpoll_epi", "eventpoll_pwq"}

// SocketSlab returns how much SocketCaches grew from a to b, and false when
// /proc/slabinfo could not be read.
func SocketSlab(a, b System) (int64, bool) {
	if a.Caches == nil || b.Caches == nil {
		return 0, false
	}
	var d int64
	for _, name := range SocketCaches {
		d += b.Caches[name] - a.Caches[name]
	}
	return d, true
}
