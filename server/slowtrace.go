package server

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
	traceWindow = 4 * time.Second
	traceBytes  = 64 << 20
	traceAfter  = 500 * time.Millisecond
	traceEvery  = 10 * time.Second
	traceFiles  = 20
)

// slowAnswerCategory is the category of the log event that marks a slow
// answer in the trace, its message the answer's time in µs: what
// perf/cmd/slowtrace looks for.
const slowAnswerCategory = "slow answer"

// slowTrace keeps Go's flight recorder running and writes its window to a
// file when a SET's egress reports an answer slower than -trace-slow: the
// runtime trace of the seconds around a stall, which a trace started by hand
// (/debug/pprof/trace) rarely catches.
type slowTrace struct {
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

// traceDir is where -trace-slow writes: -trace-dir, or traces under -data.
func (s *Server) traceDir() string {
	if s.opts.TraceDir != "" {
		return s.opts.TraceDir
	}
	return filepath.Join(s.opts.Data, "traces")
}

func newSlowTrace(dir string, log *slog.Logger) (*slowTrace, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-trace-dir: %w", err)
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: traceWindow, MaxBytes: traceBytes})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("-trace-slow: starting the flight recorder: %w", err)
	}
	t := &slowTrace{fr: fr, dir: dir, log: log, kick: make(chan int64, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go t.run()
	return t, nil
}

// slow is the egress's report: it never blocks a SET. It marks the moment
// and the goroutine in the trace (slowAnswerCategory), so that a reader
// finds the stall in the window.
func (t *slowTrace) slow(ns int64) {
	if !trace.IsEnabled() { // the recorder stopped after its last file
		return
	}
	trace.Log(context.Background(), slowAnswerCategory, strconv.FormatInt(ns/1e3, 10))
	select {
	case t.kick <- ns:
	default:
	}
}

func (t *slowTrace) run() {
	defer close(t.done)
	defer t.fr.Stop()
	for t.written.Load() < traceFiles {
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
		pause := time.NewTimer(traceEvery)
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
	t.log.Warn("-trace-slow: no more traces", "written", traceFiles, "dir", t.dir)
}

func (t *slowTrace) write(at time.Time, took time.Duration) {
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

// close stops the recorder; a trace being written is finished first.
func (t *slowTrace) close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}
