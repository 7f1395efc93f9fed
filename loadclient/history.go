package loadclient

import (
	"os"
	"strconv"
	"sync"
)

// The history (-history): every money answer the load was told, a CSV line each —
// user,kind,request,status,envelope,amount — where a SHAKE's request is its request id (its
// stamp without -request-ids) and an OPEN's is its envelope: the record a Jepsen-style check
// reads to find a request answered twice with different money, or an envelope told to two
// requests (perf/internal/harness, CheckHistory). Each loop fills its own buffer and writes it
// whole to the shared file: the hot path appends digits, nothing more.

// HistoryHeader is the history file's first line.
const HistoryHeader = "user,kind,request,status,envelope,amount\n"

const historyChunk = 64 << 10

// historyFile is the file the loops' histories go to.
type historyFile struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

func openHistory(path string) (*historyFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteString(HistoryHeader); err != nil {
		f.Close()
		return nil, err
	}
	return &historyFile{f: f}, nil
}

func (h *historyFile) write(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		_, h.err = h.f.Write(b)
	}
}

// close closes the file, returning the first error of its writes.
func (h *historyFile) close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.f.Close(); h.err == nil {
		h.err = err
	}
	return h.err
}

// history is a loop's part of the history.
type history struct {
	file *historyFile // nil: no history
	buf  []byte
}

// told notes a money answer.
func (h *history) told(user uint32, kind string, req uint64, status uint8, env uint64, amount uint32) {
	if h.file == nil {
		return
	}
	b := strconv.AppendUint(h.buf, uint64(user), 10)
	b = append(append(b, ','), kind...)
	b = strconv.AppendUint(append(b, ','), req, 10)
	b = strconv.AppendUint(append(b, ','), uint64(status), 10)
	b = strconv.AppendUint(append(b, ','), env, 10)
	b = strconv.AppendUint(append(b, ','), uint64(amount), 10)
	h.buf = append(b, '\n')
	if len(h.buf) >= historyChunk {
		h.flush()
	}
}

func (h *history) flush() {
	if h.file != nil && len(h.buf) > 0 {
		h.file.write(h.buf)
		h.buf = h.buf[:0]
	}
}
