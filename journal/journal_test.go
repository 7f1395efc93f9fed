package journal

import (
	"strings"
	"testing"
)

// RecTest is a record type for tests: the journal gives types no meaning.
const RecTest = 0x7f

func open(t testing.TB, dir string, mod func(*Options)) *Journal {
	t.Helper()
	o := Options{Dir: dir, Sets: 4, RingBytes: 4096}
	if mod != nil {
		mod(&o)
	}
	j, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

type rec struct {
	typ     uint8
	pid     uint16
	payload string
}

func replay(t testing.TB, j *Journal) []rec {
	t.Helper()
	var got []rec
	if err := j.Replay(From{}, func(r Record) error {
		got = append(got, rec{r.Type, r.PID, string(r.Payload)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// write appends n records per producer, interleaved, each batch published,
// and waits until they are durable.
func write(t testing.TB, j *Journal, producers, n int) []rec {
	t.Helper()
	ps := make([]*Producer, producers)
	for i := range ps {
		ps[i] = j.Producer()
	}
	if err := j.Start(); err != nil {
		t.Fatal(err)
	}
	var want []rec
	var last []uint64 = make([]uint64, producers)
	for k := range n {
		for i, p := range ps {
			payload := strings.Repeat(string(rune('a'+i)), k%7) + string(rune('0'+k%10))
			last[i] = p.Append(uint8(k%250+1), []byte(payload))
			want = append(want, rec{uint8(k%250 + 1), p.ID(), payload})
			if k%3 == 0 {
				p.Publish()
			}
		}
	}
	for i, p := range ps {
		if err := p.Wait(last[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// perProducer keeps each producer's records in order: the guarantee across
// producers is only that each one's order holds.
func perProducer(rs []rec) map[uint16][]rec {
	m := map[uint16][]rec{}
	for _, r := range rs {
		m[r.pid] = append(m[r.pid], r)
	}
	return m
}

func equalPerProducer(t *testing.T, got, want []rec) {
	t.Helper()
	g, w := perProducer(got), perProducer(want)
	if len(g) != len(w) {
		t.Fatalf("records of %d producers replayed; want %d", len(g), len(w))
	}
	for pid, ws := range w {
		gs := g[pid]
		if len(gs) != len(ws) {
			t.Fatalf("producer %d: %d records replayed; want %d", pid, len(gs), len(ws))
		}
		for i := range ws {
			if gs[i] != ws[i] {
				t.Fatalf("producer %d record %d: replayed %+v; want %+v", pid, i, gs[i], ws[i])
			}
		}
	}
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := listSegments(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestReplayOrder(t *testing.T) {
	dir := t.TempDir()
	// Small segments and rings: rotation and ring wrap-around happen many times.
	want := write(t, open(t, dir, func(o *Options) { o.SegmentBytes = 2048; o.RingBytes = 1024 }), 5, 400)
	j := open(t, dir, nil)
	if len(j.segs) < 5 {
		t.Fatalf("%d segments; want several (rotation)", len(j.segs))
	}
	equalPerProducer(t, replay(t, j), want)

	// A restarted journal appends after what it replayed.
	more := write(t, j, 2, 10)
	equalPerProducer(t, replay(t, open(t, dir, nil)), append(want, more...))
}
