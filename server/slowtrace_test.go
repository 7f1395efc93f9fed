package server_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"hongbao/proto"
	"hongbao/server"
)

// TestTraceSlow: with -trace-slow below any answer's time, the first answer
// has the flight recorder's window written as a runtime trace, marked, and
// the reports that follow within the pause between traces write none.
func TestTraceSlow(t *testing.T) {
	if *pipelineMode == "none" {
		t.Skip("-trace-slow needs an egress stage")
	}
	dir := filepath.Join(t.TempDir(), "made")
	ts := startServer(t, func(o *server.Options) { o.TraceSlow, o.TraceDir = time.Nanosecond, dir })
	c := login(t, ts, 1)
	files := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "slow-*.trace"))
		return m
	}
	waitFor(t, "a trace file", func() bool { return len(files()) > 0 })
	for range 10 {
		stamp := c.nextStamp()
		c.send(proto.AppendShake(nil, stamp))
		c.answer(stamp)
	}
	time.Sleep(time.Second) // past the wait before a trace is written
	if m := files(); len(m) != 1 {
		t.Fatalf("%d trace files %q; want 1 (one every 10 s)", len(m), m)
	}
	b, err := os.ReadFile(files()[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 1000 {
		t.Fatalf("trace file of %d bytes starting %q; want a Go runtime trace", len(b), b[:min(len(b), 16)])
	}
	// The mark perf/cmd/slowtrace looks for (its markCategory).
	if !bytes.Contains(b, []byte(server.SlowAnswerCategory)) || server.SlowAnswerCategory != "slow answer" {
		t.Errorf("no %q log event in the trace, or not the category slowtrace reads", server.SlowAnswerCategory)
	}
}
