// Package exposition writes metrics in the Prometheus text format: the
// families a server computes at scrape time from the counters its stages
// and loops keep, each with its HELP and TYPE, and the Go runtime's and the
// process's families of VictoriaMetrics/metrics, put to convention.
package exposition

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// Writer writes metric families in the Prometheus text format to W.
type Writer struct{ W io.Writer }

// Family starts the family name: its HELP and TYPE lines.
func (e Writer) Family(name, typ, help string) {
	fmt.Fprintf(e.W, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// Sample writes one series: a family name with its labels, if any.
func (e Writer) Sample(series string, v uint64) { fmt.Fprintf(e.W, "%s %d\n", series, v) }

// Counter writes a counter family of one series.
func (e Writer) Counter(name, help string, v uint64) {
	e.Family(name, "counter", help)
	e.Sample(name, v)
}

// Gauge writes a gauge family of one series.
func (e Writer) Gauge(name, help string, v int64) {
	e.Family(name, "gauge", help)
	fmt.Fprintf(e.W, "%s %d\n", name, v)
}

// WriteRuntime writes the Go runtime and process metrics of
// VictoriaMetrics/metrics with their TYPE lines, put to convention where the
// library falls short of it: its HELP lines carry no text (runtimeHelp has
// it), it types the cumulative process_io_*_total families as gauges, and it
// names three families against the convention (runtimeRenames).
func WriteRuntime(w io.Writer) {
	var b bytes.Buffer
	metrics.WriteProcessMetrics(&b)
	for line := range strings.Lines(b.String()) {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name := renamed(strings.TrimSpace(rest))
			fmt.Fprintf(w, "# HELP %s %s\n", name, runtimeHelp[name])
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(strings.TrimSpace(rest), " ")
			if name = renamed(name); strings.HasSuffix(name, "_total") {
				typ = "counter"
			}
			fmt.Fprintf(w, "# TYPE %s %s\n", name, typ)
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			if to, ok := runtimeRenames[line[:i]]; ok {
				line = to + line[i:]
			}
		}
		io.WriteString(w, line)
	}
}

// runtimeRenames: a counter's name ends in _total, and only a histogram's or
// a summary's series end in _count.
var runtimeRenames = map[string]string{
	"go_cgo_calls_count": "go_cgo_calls_total",
	"go_gc_forced_count": "go_gc_forced_total",
	"go_cpu_count":       "go_cpus",
}

func renamed(name string) string {
	if to, ok := runtimeRenames[name]; ok {
		return to
	}
	return name
}

// runtimeHelp is the HELP text of each runtime and process family, by its
// name as exposed. A family missing here has an empty HELP, which the lint
// test of /metrics reports.
var runtimeHelp = map[string]string{
	"go_sched_latencies_seconds":                    "Time goroutines spent runnable before running (runtime/metrics /sched/latencies:seconds).",
	"go_mutex_wait_seconds_total":                   "Time goroutines spent blocked on a sync.Mutex, sync.RWMutex or runtime-internal lock.",
	"go_gc_mark_assist_cpu_seconds_total":           "CPU time goroutines spent assisting the GC's marking.",
	"go_gc_cpu_seconds_total":                       "CPU time spent on the GC.",
	"go_gc_pauses_seconds":                          "Stop-the-world pauses of the GC (runtime/metrics /gc/pauses:seconds).",
	"go_scavenge_cpu_seconds_total":                 "CPU time spent returning unused memory to the operating system.",
	"go_memlimit_bytes":                             "The Go runtime's soft memory limit (GOMEMLIMIT).",
	"go_memstats_alloc_bytes":                       "Bytes of heap objects allocated and not yet freed (runtime.MemStats.Alloc).",
	"go_memstats_alloc_bytes_total":                 "Bytes allocated for heap objects (runtime.MemStats.TotalAlloc).",
	"go_memstats_buck_hash_sys_bytes":               "Bytes of memory in the profiling bucket hash tables.",
	"go_memstats_frees_total":                       "Heap objects freed.",
	"go_memstats_gc_cpu_fraction":                   "Fraction of the CPU time available since the program started that the GC used.",
	"go_memstats_gc_sys_bytes":                      "Bytes of memory in GC metadata.",
	"go_memstats_heap_alloc_bytes":                  "Bytes of heap objects allocated and not yet freed (runtime.MemStats.HeapAlloc).",
	"go_memstats_heap_idle_bytes":                   "Bytes in idle (unused) heap spans.",
	"go_memstats_heap_inuse_bytes":                  "Bytes in in-use heap spans.",
	"go_memstats_heap_objects":                      "Heap objects allocated and not yet freed.",
	"go_memstats_heap_released_bytes":               "Bytes of physical memory returned to the operating system.",
	"go_memstats_heap_sys_bytes":                    "Bytes of heap memory obtained from the operating system.",
	"go_memstats_last_gc_time_seconds":              "When the last GC finished, in seconds since the Unix epoch.",
	"go_memstats_lookups_total":                     "Pointer lookups performed by the runtime.",
	"go_memstats_mallocs_total":                     "Heap objects allocated.",
	"go_memstats_mcache_inuse_bytes":                "Bytes of allocated mcache structures.",
	"go_memstats_mcache_sys_bytes":                  "Bytes of memory obtained from the operating system for mcache structures.",
	"go_memstats_mspan_inuse_bytes":                 "Bytes of allocated mspan structures.",
	"go_memstats_mspan_sys_bytes":                   "Bytes of memory obtained from the operating system for mspan structures.",
	"go_memstats_next_gc_bytes":                     "The heap size the next GC aims at.",
	"go_memstats_other_sys_bytes":                   "Bytes of memory in miscellaneous off-heap runtime allocations.",
	"go_memstats_stack_inuse_bytes":                 "Bytes in stack spans.",
	"go_memstats_stack_sys_bytes":                   "Bytes of stack memory obtained from the operating system.",
	"go_memstats_sys_bytes":                         "Bytes of memory obtained from the operating system in all.",
	"go_cgo_calls_total":                            "Calls from Go to C.",
	"go_cpus":                                       "Logical CPUs usable by the process (runtime.NumCPU).",
	"go_gc_duration_seconds":                        "Stop-the-world pause durations of the GC cycles.",
	"go_gc_forced_total":                            "GC cycles forced by the application calling runtime.GC.",
	"go_gomaxprocs":                                 "GOMAXPROCS: the most OS threads that run Go code at once.",
	"go_goroutines":                                 "Goroutines that exist now.",
	"go_threads":                                    "OS threads the Go runtime created.",
	"go_info":                                       "The Go version, in its label. Always 1.",
	"go_info_ext":                                   "The compiler, GOARCH, GOOS and GOROOT, in its labels. Always 1.",
	"process_cpu_seconds_system_total":              "CPU time of the process in the kernel.",
	"process_cpu_seconds_total":                     "CPU time of the process, user and kernel.",
	"process_cpu_seconds_user_total":                "CPU time of the process in user space.",
	"process_major_pagefaults_total":                "Page faults of the process that needed a disk read.",
	"process_minor_pagefaults_total":                "Page faults of the process that needed no disk read.",
	"process_num_threads":                           "Threads of the process.",
	"process_resident_memory_bytes":                 "Resident memory of the process (RSS).",
	"process_start_time_seconds":                    "When the process started, in seconds since the Unix epoch.",
	"process_virtual_memory_bytes":                  "Virtual memory of the process.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory of the process.",
	"process_resident_memory_peak_bytes":            "Peak resident memory of the process.",
	"process_resident_memory_anon_bytes":            "Resident anonymous memory of the process.",
	"process_resident_memory_file_bytes":            "Resident file-backed memory of the process.",
	"process_resident_memory_shared_bytes":          "Resident shared memory of the process.",
	"process_io_read_bytes_total":                   "Bytes the process read through read-like system calls, disk or not.",
	"process_io_written_bytes_total":                "Bytes the process wrote through write-like system calls, disk or not.",
	"process_io_read_syscalls_total":                "Read-like system calls of the process.",
	"process_io_write_syscalls_total":               "Write-like system calls of the process.",
	"process_io_storage_read_bytes_total":           "Bytes the process caused to be read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes the process caused to be written to storage.",
	"process_pressure_cpu_waiting_seconds_total":    "Time some of the process's cgroup's tasks waited for a CPU (PSI).",
	"process_pressure_cpu_stalled_seconds_total":    "Time all of the process's cgroup's tasks waited for a CPU (PSI).",
	"process_pressure_io_waiting_seconds_total":     "Time some of the process's cgroup's tasks waited for I/O (PSI).",
	"process_pressure_io_stalled_seconds_total":     "Time all of the process's cgroup's tasks waited for I/O (PSI).",
	"process_pressure_memory_waiting_seconds_total": "Time some of the process's cgroup's tasks waited for memory (PSI).",
	"process_pressure_memory_stalled_seconds_total": "Time all of the process's cgroup's tasks waited for memory (PSI).",
	"process_cgroup_cpu_throttled_seconds_total":    "Time the process's cgroup was throttled by its CPU limit.",
}
