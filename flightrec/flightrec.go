// Package flightrec keeps Go's flight recorder running and writes its
// window to a file when an answer is slower than -trace-slow: the runtime
// trace of the seconds around a stall, which a trace started by hand
// (/debug/pprof/trace) rarely catches. perf/cmd/slowtrace reads the files.
package flightrec

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/trace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The -trace-slow flight recording: how much it keeps, how long after a slow
// answer it waits so that the trace holds what followed too, and how often
// and how many times it writes (a server stalled for minutes must not fill
// its disk with traces of the same stall).
const (
	Window     = 4 * time.Second // the recorder keeps at least this much
	traceBytes = 64 << 20
	traceAfter = 500 * time.Millisecond
	Every      = 10 * time.Second // at most one file this often
	Files      = 20               // and this many in all
)

// Category is the category of the log event that marks a slow
// answer in the trace, its message the answer's time in µs: what
// perf/cmd/slowtrace looks for.
const Category = "slow answer"

// Recorder is a running flight recorder and the files it writes.
type Recorder struct {
	fr      *trace.FlightRecorder
	dir     string
	log     *slog.Logger
	kick    chan int64 // the slow answer's ns; one waits, the rest are dropped
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	written atomic.Uint64 // traces written
	skipped atomic.Uint64 // slow answers during the pause after a trace: none traced
}

// New starts the flight recorder; the traces go to dir.
func New(dir string, log *slog.Logger) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-trace-dir: %w", err)
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: Window, MaxBytes: traceBytes})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("-trace-slow: starting the flight recorder: %w", err)
	}
	t := &Recorder{fr: fr, dir: dir, log: log, kick: make(chan int64, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go t.run()
	return t, nil
}

// Slow is the egress's report: it never blocks a SET. It marks the moment
// and the goroutine in the trace (Category), so that a reader
// finds the stall in the window.
func (t *Recorder) Slow(ns int64) {
	if !trace.IsEnabled() { // the recorder stopped after its last file
		return
	}
	trace.Log(context.Background(), Category, strconv.FormatInt(ns/1e3, 10))
	select {
	case t.kick <- ns:
	default:
	}
}

func (t *Recorder) run() {
	defer close(t.done)
	defer t.fr.Stop()
	for t.written.Load() < Files {
		var ns int64
		select {
		case <-t.stop:
			return
		case ns = <-t.kick:
		}
		at := time.Now()
		select {
		case <-t.stop:
		case <-time.After(traceAfter):
		}
		t.write(at, time.Duration(ns))
		// Slow answers during the pause are not traced: by its end they are
		// older than the recorder's window.
		pause := time.NewTimer(Every)
		for paused := true; paused; {
			select {
			case <-t.stop:
				pause.Stop()
				return
			case <-pause.C:
				paused = false
			case <-t.kick:
				t.skipped.Add(1)
			}
		}
	}
	t.log.Warn("-trace-slow: no more traces", "written", Files, "dir", t.dir)
}

func (t *Recorder) write(at time.Time, took time.Duration) {
	path := filepath.Join(t.dir, fmt.Sprintf("slow-%s.trace", at.UTC().Format("20060102T150405.000")))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = t.fr.WriteTo(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.log.Error("-trace-slow: writing the trace", "path", path, "err", err)
		return
	}
	t.written.Add(1)
	t.log.Warn("slow answer: runtime trace written", "took", took.Round(time.Microsecond), "path", path)
}

// Close stops the recorder; a trace being written is finished first.
func (t *Recorder) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// Written is how many traces were written; Skipped how many slow answers
// came within the pause after one, not traced.
func (t *Recorder) Written() uint64 { return t.written.Load() }
func (t *Recorder) Skipped() uint64 { return t.skipped.Load() }
