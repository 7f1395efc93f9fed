package server_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
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
	// They come within the pause after the first trace: not traced.
	waitFor(t, "the slow answers after the first trace to be skipped", func() bool { return metric(t, ts, "hongbao_slow_traces_skipped_total") > 0 })
	if m := files(); len(m) != 1 || metric(t, ts, "hongbao_slow_traces_total") != 1 {
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
