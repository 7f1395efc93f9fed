package harness

import "fmt"

// Memory is a server's memory at one moment, after a forced collection.
type Memory struct {
	RSS        int64 // VmRSS
	HeapInuse  int64 // go_memstats_heap_inuse_bytes
	StackInuse int64 // go_memstats_stack_inuse_bytes
	Goroutines int64 // go_goroutines
	Kernel     Kernel
}

// HeapStacks is the Go heap in use plus the goroutine stacks.
func (m Memory) HeapStacks() int64 { return m.HeapInuse + m.StackInuse }

// ReadMemory collects garbage in the server (Admin.GC) and reads its RSS,
// its Go memory from /metrics (what metrics.WriteProcessMetrics exports)
// and the kernel's figures.
func ReadMemory(s *Server) (Memory, error) {
	var m Memory
	if err := s.Admin.GC(); err != nil {
		return m, err
	}
	met, err := s.Admin.Metrics()
	if err != nil {
		return m, err
	}
	for name, p := range map[string]*int64{
		"go_memstats_heap_inuse_bytes":  &m.HeapInuse,
		"go_memstats_stack_inuse_bytes": &m.StackInuse,
		"go_goroutines":                 &m.Goroutines,
	} {
		v, ok := met[name]
		if !ok {
			return m, fmt.Errorf("the server's /metrics has no %s", name)
		}
		*p = int64(v)
	}
	if m.RSS, err = RSS(s.PID); err != nil {
		return m, err
	}
	m.Kernel, err = ReadKernel()
	return m, err
}
