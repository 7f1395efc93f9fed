package server_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hongbao-io/hongbao/journal"
	"github.com/hongbao-io/hongbao/proto"
	"github.com/hongbao-io/hongbao/server"
)

// logBuffer keeps what the server logs, for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *logBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// startOn starts a server as startServer does, on -data data, logging into
// a buffer; a New that fails returns its error and no server.
func startOn(t *testing.T, data string, edit func(*server.Options)) (*testServer, *logBuffer, error) {
	t.Helper()
	o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Sets: 4, Ring: 128, Loops: 2,
		Ingress: *ingressMode, Pipeline: *pipelineMode, Stages: *stagesMode, Data: data}
	if edit != nil {
		edit(&o)
	}
	o.Fill()
	lb := &logBuffer{}
	s, err := server.New(o, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		return nil, lb, err
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ts := &testServer{Server: s, t: t, opts: o, addr: s.Addrs()[0].String(), admin: "http://" + s.AdminAddr(),
		hc: &http.Client{Transport: &http.Transport{}, Timeout: waitTime}}
	t.Cleanup(func() {
		if err := ts.shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		ts.hc.CloseIdleConnections()
	})
	return ts, lb, nil
}

// moneyRun starts a server on data, deals and shakes some money and shuts
// it down (its snapshot holds it all), returning the money.
func moneyRun(t *testing.T, data string, total string) [10]uint64 {
	t.Helper()
	ts, _, err := startOn(t, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.waitCampaign(ts.startCampaign("shake", "rate=100000&total="+total+"&min=1&max=100").ID)
	alice := login(t, ts, 1)
	for range 10 {
		s := alice.nextStamp()
		alice.send(proto.AppendShake(nil, s))
		alice.answer(s)
	}
	m := money(ts.stats())
	if err := ts.shutdown(); err != nil {
		t.Fatal(err)
	}
	return m
}

func segments(t *testing.T, data string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(data, "journal", "*.journal"))
	if err != nil || len(m) == 0 {
		t.Fatalf("journal segments %v, %v", m, err)
	}
	return m
}

// TestDataDirLock: the -data directory itself is locked, so deleting a lock
// file lets no second server in; the lock goes with the first server.
func TestDataDirLock(t *testing.T) {
	data := t.TempDir()
	if _, _, err := startOn(t, data, nil); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(data, "LOCK")) // what a lock file would be
	ts, _, err := startOn(t, data, nil)
	if err == nil {
		ts.shutdown()
		t.Fatal("a second server started on the same -data")
	}
	if !strings.Contains(err.Error(), "locked") || !strings.Contains(err.Error(), data) {
		t.Fatalf("second server: %v; want a refusal naming -data as locked", err)
	}
}

// TestDataDirLockReleased: a server that shut down leaves the directory to
// the next one.
func TestDataDirLockReleased(t *testing.T) {
	data := t.TempDir()
	moneyRun(t, data, "10")
	if _, _, err := startOn(t, data, nil); err != nil {
		t.Fatalf("after the first server's shutdown: %v", err)
	}
}

// TestStartRefusesOlderState: with the newest snapshot gone (or an older one
// in its place) a start would replay onto older state, or skip what the lost
// snapshot held: it is refused, naming what is missing.
func TestStartRefusesOlderState(t *testing.T) {
	data := t.TempDir()
	moneyRun(t, data, "100")
	snaps := filepath.Join(data, "snapshots")
	first, _ := filepath.Glob(filepath.Join(snaps, "*.snapshot"))
	if len(first) != 1 {
		t.Fatalf("snapshots %v after the first run; want one", first)
	}
	older, err := os.ReadFile(first[0])
	if err != nil {
		t.Fatal(err)
	}
	want := moneyRun(t, data, "200")
	newest, _ := filepath.Glob(filepath.Join(snaps, "*.snapshot"))
	if len(newest) != 1 || newest[0] == first[0] {
		t.Fatalf("snapshots %v after the second run; want one newer than %s", newest, first[0])
	}
	keep, err := os.ReadFile(newest[0])
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(newest[0])
	for _, c := range []struct {
		name  string
		setup func()
	}{
		{"the newest snapshot deleted", func() {}},
		{"an older snapshot in its place", func() { os.WriteFile(first[0], older, 0o644) }},
	} {
		c.setup()
		for _, repair := range []bool{false, true} {
			ts, _, err := startOn(t, data, func(o *server.Options) { o.JournalRepair = repair })
			if err == nil {
				ts.shutdown()
				t.Fatalf("%s (repair %v): the server started", c.name, repair)
			}
			if !errors.Is(err, journal.ErrMissing) || !strings.Contains(err.Error(), ".journal") {
				t.Fatalf("%s (repair %v): %v; want the missing segment named", c.name, repair, err)
			}
			t.Logf("%s (repair %v): refused: %v", c.name, repair, err)
		}
	}
	os.Remove(first[0])
	os.WriteFile(newest[0], keep, 0o644)
	ts, _, err := startOn(t, data, nil)
	if err != nil {
		t.Fatalf("with the newest snapshot back: %v", err)
	}
	if got := money(ts.stats()); got != want {
		t.Fatalf("money %v after the restart; want %v", got, want)
	}
}

// TestJournalCutsLoggedAndCounted: a torn tail is cut, logged with its file,
// offset, bytes and records, and counted in /metrics; damage before the end
// stops the start, and -journal-repair starts, keeping the cut bytes beside
// the journal and logging each cut.
func TestJournalCutsLoggedAndCounted(t *testing.T) {
	t.Run("torn", func(t *testing.T) {
		data := t.TempDir()
		want := moneyRun(t, data, "100")
		segs := segments(t, data)
		newest := segs[len(segs)-1]
		f, err := os.OpenFile(newest, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte("HBRD\x00\x00\x00\x00\x00\x00")) // a round's header begun, the crash before the rest
		f.Close()
		ts, logs, err := startOn(t, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := money(ts.stats()); got != want {
			t.Fatalf("money %v after the torn tail; want %v", got, want)
		}
		line := logLine(t, logs.String(), "torn tail cut")
		t.Log(line)
		for _, f := range []string{"level=WARN", "file=" + newest, "bytes=10", "records=0", "offset="} {
			if !strings.Contains(line, f) {
				t.Fatalf("the log line %q lacks %q", line, f)
			}
		}
		body, _ := scrapeMetrics(t, ts)
		for _, s := range []string{`hongbao_journal_cuts_total{kind="torn"} 1`, `hongbao_journal_cuts_total{kind="repair"} 0`, "hongbao_journal_cut_bytes_total 10"} {
			if !bytes.Contains(body, []byte(s)) {
				t.Fatalf("/metrics lacks %q", s)
			}
		}
	})
	t.Run("corrupt, then repaired", func(t *testing.T) {
		data := t.TempDir()
		want := moneyRun(t, data, "100")
		segs := segments(t, data)
		newest := segs[len(segs)-1]
		b, err := os.ReadFile(newest)
		if err != nil {
			t.Fatal(err)
		}
		const firstRecord = 40 + 24 // the segment's header, the first round's
		b[firstRecord+2] ^= 0x80
		os.WriteFile(newest, b, 0o644)
		_, _, err = startOn(t, data, nil)
		var ce *journal.CorruptError
		if !errors.As(err, &ce) || ce.File != newest || ce.Offset != 40 || !strings.Contains(err.Error(), "-journal-repair") {
			t.Fatalf("a bad round under the checkpoint: %v; want a CorruptError naming %s at offset 40 and the repair", err, newest)
		}
		t.Logf("refused: %v", err)
		ts, logs, err := startOn(t, data, func(o *server.Options) { o.JournalRepair = true })
		if err != nil {
			t.Fatalf("-journal-repair: %v", err)
		}
		line := logLine(t, logs.String(), "journal repaired")
		t.Log(line)
		for _, f := range []string{"level=ERROR", "file=" + newest, "offset=40", "bytes=", "records=", "kept="} {
			if !strings.Contains(line, f) {
				t.Fatalf("the log line %q lacks %q", line, f)
			}
		}
		kept, _ := filepath.Glob(newest + ".cut-*")
		if len(kept) != 1 {
			t.Fatalf("kept beside the journal: %v; want the cut bytes", kept)
		}
		if k, _ := os.ReadFile(kept[0]); !bytes.Equal(k, b[40:]) {
			t.Fatalf("%s holds %d bytes; want the %d cut", kept[0], len(k), len(b)-40)
		}
		// The cut took the snapshot's marks: its state is the snapshot's.
		if got := money(ts.stats()); got != want {
			t.Fatalf("money %v after the repair; want the snapshot's %v", got, want)
		}
		logLine(t, logs.String(), "marked again")
		st := ts.stats()
		if err := st.Check(); err != nil {
			t.Fatal(err)
		}
		body, _ := scrapeMetrics(t, ts)
		if bytes.Contains(body, []byte(`hongbao_journal_cuts_total{kind="repair"} 0`)) {
			t.Fatal("/metrics counts no repair")
		}
		if err := ts.shutdown(); err != nil {
			t.Fatal(err)
		}
		ts, _, err = startOn(t, data, nil)
		if err != nil {
			t.Fatalf("the start after the repair: %v", err)
		}
		if got := money(ts.stats()); got != want {
			t.Fatalf("money %v at the start after the repair; want %v", got, want)
		}
	})
}

// logLine is the first line of logs holding msg.
func logLine(t *testing.T, logs, msg string) string {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	t.Fatalf("no log line %q in:\n%s", msg, logs)
	return ""
}
