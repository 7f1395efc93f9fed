package journal

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidwall/wal"
)

// The writer against github.com/tidwall/wal, the same rounds for both: R
// records of a SHAKE's size (12 bytes of payload) from 32 producers, made
// durable with one sync, then the next round. Each reports records made
// durable a second and the p99 of a round's commit (write + sync: what a
// money answer waits for).
//
//	go test -run '^$' -bench Writer -benchtime 1s -count 3 ./journal/

const benchProducers = 32

func BenchmarkWriter(b *testing.B) {
	for _, r := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("journal/round=%d", r), func(b *testing.B) { benchJournal(b, r, nil) })
		b.Run(fmt.Sprintf("tidwall-wal/round=%d", r), func(b *testing.B) { benchTidwall(b, r) })
	}
	// The writer's own cost, without the disk's: a segment file that keeps
	// nothing.
	for _, r := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("journal-nodisk/round=%d", r), func(b *testing.B) {
			benchJournal(b, r, func(string) (File, error) { return discard{}, nil })
		})
	}
	// One round's work alone (gather, frame, write, publish), on the
	// benchmark's goroutine: no wake-ups, no disk.
	for _, r := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("journal-round/round=%d", r), func(b *testing.B) { benchRound(b, r) })
	}
}

func report(b *testing.B, lat []time.Duration, records int) {
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-commit-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-commit-ms")
}

func benchJournal(b *testing.B, perRound int, create func(string) (File, error)) {
	j, err := Open(Options{Dir: b.TempDir(), Sets: benchProducers, RoundEvery: -1, Create: create}) // rounds back to back, as the library writes
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]*Producer, benchProducers)
	for i := range ps {
		ps[i] = j.Producer()
	}
	if err := j.Start(); err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	payload := make([]byte, 12)
	lat := make([]time.Duration, 0, b.N)
	pos := make([]uint64, benchProducers)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		for k := range perRound {
			binary.BigEndian.PutUint64(payload, uint64(k))
			p := ps[k%benchProducers]
			pos[p.id] = p.Append(RecTest, payload)
		}
		for _, p := range ps {
			p.Publish()
		}
		for _, p := range ps {
			for !p.Durable(pos[p.id]) {
				if err := p.Wait(pos[p.id]); err != nil {
					b.Fatal(err)
				}
			}
		}
		lat = append(lat, time.Since(t))
	}
	report(b, lat, b.N*perRound)
}

func benchTidwall(b *testing.B, perRound int) {
	l, err := wal.Open(b.TempDir(), &wal.Options{NoSync: false, SegmentSize: 64 << 20, LogFormat: wal.Binary, NoCopy: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	payload := make([]byte, 12+3) // the same body as a journal record: type, producer, payload
	var batch wal.Batch
	idx := uint64(1)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		batch.Clear()
		for k := range perRound {
			binary.BigEndian.PutUint64(payload[3:], uint64(k))
			batch.Write(idx, payload)
			idx++
		}
		if err := l.WriteBatch(&batch); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	report(b, lat, b.N*perRound)
}

// BenchmarkReplay: records replayed a second at a start (decode and CRC
// check; the stages' Restore comes on top), over a journal of a million
// SHAKE-sized records.
//
//	go test -run '^$' -bench Replay -benchtime 3x -count 3 ./journal/
func BenchmarkReplay(b *testing.B) {
	const records = 1_000_000
	dir := b.TempDir()
	j, err := Open(Options{Dir: dir, Sets: 1, RingBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	p := j.Producer()
	if err := j.Start(); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 12)
	for i := range records {
		binary.BigEndian.PutUint64(payload, uint64(i))
		p.Append(RecTest, payload)
		if i%1024 == 0 {
			p.Publish()
		}
	}
	if err := p.Wait(p.Pos()); err != nil {
		b.Fatal(err)
	}
	j.Close()
	b.ResetTimer()
	for range b.N {
		j, err := Open(Options{Dir: dir, Sets: 1})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := j.Replay(From{}, func(Record) error { n++; return nil }); err != nil || n != records {
			b.Fatalf("%d records, %v", n, err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func benchRound(b *testing.B, perRound int) {
	j, err := Open(Options{Dir: b.TempDir(), Sets: benchProducers, Create: func(string) (File, error) { return discard{}, nil }})
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]*Producer, benchProducers)
	for i := range ps {
		ps[i] = j.Producer()
	}
	if err := j.rotate(); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 12)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range perRound {
			binary.BigEndian.PutUint64(payload, uint64(k))
			ps[k%benchProducers].Append(RecTest, payload)
		}
		for _, p := range ps {
			p.Publish()
		}
		if !j.commit() {
			b.Fatal("a round wrote nothing")
		}
	}
	b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "records/s")
}
