package journal

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// discard is a segment file that keeps nothing: the writer's own cost.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Sync() error                 { return nil }
func (discard) Close() error                { return nil }

// TestRoundAllocatesNothing: the writer's round — gathering, framing with its
// checksums, the write, the sync, the durable positions and the checkpoint's
// wake-up — allocates nothing.
func TestRoundAllocatesNothing(t *testing.T) {
	j := open(t, t.TempDir(), func(o *Options) {
		o.RingBytes = 1 << 16
		o.Create = func(string) (File, error) { return discard{}, nil }
	})
	ps := []*Producer{j.Producer(), j.Producer()}
	if err := j.rotate(); err != nil { // the writer's segment, without its goroutine: commit runs here
		t.Fatal(err)
	}
	payload := make([]byte, 12)
	allocs := testing.AllocsPerRun(2000, func() {
		for _, p := range ps {
			for range 3 {
				p.Append(RecTest, payload)
			}
			p.Publish()
		}
		if !j.commit() {
			t.Fatal("a round wrote nothing")
		}
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per round; want 0", allocs)
	}
}

// failingFile fails its Sync (or, with writes, its Write) from the nth call
// on.
type failingFile struct {
	File
	calls  *atomic.Int64
	after  int64
	writes bool
}

var errDisk = errors.New("injected: EIO")

func (f failingFile) Sync() error {
	if !f.writes && f.calls.Add(1) > f.after {
		return errDisk
	}
	return f.File.Sync()
}

func (f failingFile) Write(b []byte) (int, error) {
	if f.writes && f.calls.Add(1) > f.after {
		return len(b) / 2, errDisk // a torn write
	}
	return f.File.Write(b)
}

func TestSyncFailureStopsDurability(t *testing.T) {
	t.Run("sync", func(t *testing.T) { failureStopsDurability(t, false) })
	t.Run("write", func(t *testing.T) { failureStopsDurability(t, true) })
}

func failureStopsDurability(t *testing.T, writes bool) {
	var calls atomic.Int64
	var failed atomic.Pointer[error]
	dir := t.TempDir()
	j := open(t, dir, func(o *Options) {
		o.Create = func(path string) (File, error) {
			f, err := createFile(path)
			return failingFile{f, &calls, 2, writes}, err // the header's and one round's succeed
		}
		o.OnFail = func(err error) { failed.Store(&err) }
	})
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(RecTest, []byte("one"))); err != nil {
		t.Fatalf("first round: %v", err)
	}
	pos := p.Append(RecTest, []byte("two"))
	if err := p.Wait(pos); !errors.Is(err, errDisk) {
		t.Fatalf("second round: %v; want the injected error", err)
	}
	if p.Durable(pos) || !j.Failed() || failed.Load() == nil {
		t.Fatalf("after a failed sync: durable %v, failed %v, reported %v", p.Durable(pos), j.Failed(), failed.Load())
	}
	// Appending after the failure neither blocks on a full ring nor becomes durable.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < 1000 && time.Now().Before(deadline); i++ {
		pos = p.Append(RecTest, make([]byte, 100))
	}
	if p.Durable(pos) {
		t.Fatal("a record appended after the failure reported durable")
	}
	if err := j.Close(); !errors.Is(err, errDisk) {
		t.Fatalf("Close: %v; want the injected error", err)
	}
	// A start finds the durable record, and after it what reached the file
	// whole (a failed sync may have written it: never answered, a prefix
	// still); a torn round is cut.
	got := replay(t, open(t, dir, nil))
	if len(got) == 0 || got[0].payload != "one" || writes && len(got) != 1 {
		t.Fatalf("replayed %+v after the failure; want the durable record first (and alone after a torn write)", got)
	}
}

// TestRoundEvery: a round starts no sooner than RoundEvery after the last
// one began, so what is published meanwhile shares one round; Close does not
// wait the interval out.
func TestRoundEvery(t *testing.T) {
	const every = 100 * time.Millisecond
	j := open(t, t.TempDir(), func(o *Options) { o.RoundEvery = every })
	p := j.Producer()
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(p.Append(RecTest, []byte("first"))); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var pos uint64
	for range 10 {
		pos = p.Append(RecTest, []byte("more"))
		p.Publish()
	}
	if err := p.Wait(pos); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < every/2 {
		t.Errorf("the second round was durable %v after the first; want about %v", took, every)
	}
	if n := j.M.Rounds.Load(); n != 2 {
		t.Errorf("%d rounds; want 2 (the first record, then the ten published within the interval)", n)
	}
	p.Append(RecTest, []byte("last"))
	p.Publish()
	start = time.Now()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > every/2 {
		t.Errorf("Close took %v: it waited the interval out", took)
	}
	if got := replay(t, open(t, j.o.Dir, nil)); len(got) != 12 {
		t.Errorf("replayed %d records; want 12", len(got))
	}
}
