package harness

import (
	"fmt"
	"time"
)

// Memory is a server's memory at one moment, after a forced collection.
type Memory struct {
	RSS        int64 `json:"rss"`                   // VmRSS
	HeapInuse  int64 `json:"heap_inuse,omitempty"`  // go_memstats_heap_inuse_bytes
	StackInuse int64 `json:"stack_inuse,omitempty"` // go_memstats_stack_inuse_bytes
	// HeapFree is heap the runtime has freed but not yet returned to the
	// OS (heap_idle − heap_released): resident, so in RSS but not HeapInuse.
	HeapFree   int64  `json:"heap_free,omitempty"`
	Goroutines int64  `json:"goroutines,omitempty"`
	System     System `json:"-"`
	// Scrape is how long GET /metrics took: metrics.WriteProcessMetrics
	// lists /proc/self/fd, so it grows with the connections.
	Scrape time.Duration `json:"scrape_ns,omitempty"`
}

// HeapStacks is the Go heap in use plus the goroutine stacks.
func (m Memory) HeapStacks() int64 { return m.HeapInuse + m.StackInuse }

// ReadMemory reads the machine (slab caches included), then ReadGoMemory.
// The machine comes first because a /metrics scrape lists /proc/self/fd,
// which fills the kernel's dentry and proc inode caches with about 0.9 KiB
// per descriptor that no socket needs.
func ReadMemory(s *Server) (Memory, error) {
	sys, err := ReadSystem(true)
	if err != nil {
		return Memory{}, err
	}
	m, err := ReadGoMemory(s)
	m.System = sys
	return m, err
}

// ReadGoMemory collects garbage in the server and reads its RSS and its Go
// memory from /metrics (what metrics.WriteProcessMetrics exports).
func ReadGoMemory(s *Server) (Memory, error) {
	var m Memory
	if err := s.Admin.GC(); err != nil {
		return m, err
	}
	t0 := time.Now()
	met, err := s.Admin.Metrics()
	m.Scrape = time.Since(t0)
	if err != nil {
		return m, err
	}
	var idle, released int64
	for name, p := range map[string]*int64{
		"go_memstats_heap_inuse_bytes":    &m.HeapInuse,
		"go_memstats_stack_inuse_bytes":   &m.StackInuse,
		"go_goroutines":                   &m.Goroutines,
		"go_memstats_heap_idle_bytes":     &idle,
		"go_memstats_heap_released_bytes": &released,
	} {
		v, ok := met[name]
		if !ok {
			return m, fmt.Errorf("server pid %d: /metrics has no %s", s.PID, name)
		}
		*p = int64(v)
	}
	m.HeapFree = idle - released
	m.RSS, err = RSS(s.PID)
	return m, err
}
