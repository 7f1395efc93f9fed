package ring_test

import (
	"fmt"
	"sync"
	"testing"

	disruptor "github.com/smarty/go-disruptor"

	"github.com/hongbao-io/hongbao/ring"
)

// Throughput of our ring beside its two baselines in the same run, on the same
// events and sizes: go-disruptor v0.5.0 (spins and sleep-polls, never parks)
// and a buffered channel.
//
// Names are BenchmarkRing/shape=S/impl=I: shape first, so the impls of one
// shape run back to back under the same machine conditions and sit together in
// the output; `benchstat -row shape -col impl` (or perf/cmd/benchring) turns
// them into the side-by-side table. One op is one event: ns/op is ns/event.

// benchSize is the slot count of every ring and the buffer of every channel.
const benchSize = 1024

// benchEvent is written in place by a producer and read by the stages.
type benchEvent struct {
	id  int64 // unique over the run: ids 0..N-1 split over the producers
	out int64 // pipeline stages 1 and 2 write it, the last stage sums it
}

// benchShape is one row of the comparison.
type benchShape struct {
	name      string
	producers int
	claim     int // events per claim (per Reserve; a channel sends them one by one)
	stages    int // 1, or 3 for the pipeline
}

var benchShapes = []benchShape{
	{"1to1-claim1", 1, 1, 1},
	{"1to1-claim16", 1, 16, 1},
	{"4to1-claim1", 4, 1, 1},
	{"4to1-claim16", 4, 16, 1},
	{"pipeline3", 1, 1, 3}, // one producer, claim 1, three stages in sequence
}

// benchImpls are the implementations under comparison, in output order.
var benchImpls = []struct {
	name string
	run  func(b *testing.B, sh benchShape) benchResult
}{
	{"ring", func(b *testing.B, sh benchShape) benchResult { return benchRing(b, sh, ring.WaitPark) }},
	{"ring-spin", func(b *testing.B, sh benchShape) benchResult { return benchRing(b, sh, ring.WaitSpin) }},
	{"disruptor", benchDisruptor},
	{"chan", benchChan},
}

func BenchmarkRing(b *testing.B) {
	for _, sh := range benchShapes {
		for _, impl := range benchImpls {
			b.Run(fmt.Sprintf("shape=%s/impl=%s", sh.name, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				res := impl.run(b, sh)
				if want := wantSum(sh, int64(b.N)); res.sum != want || res.count != int64(b.N) {
					b.Fatalf("last stage saw %d events summing to %d; want %d summing to %d", res.count, res.sum, b.N, want)
				}
				b.ReportMetric(float64(res.count)/float64(res.batches), "events/batch")
			})
		}
	}
}

// wantSum is what the last stage must sum over ids 0..n-1: the ids for one
// stage; for the pipeline, out = (id+1) + id per event, so n².
func wantSum(sh benchShape, n int64) int64 {
	if sh.stages == 1 {
		return n * (n - 1) / 2
	}
	return n * n
}

// Pipeline stage logic, shared by every implementation. By value, so that the
// channel stages keep their event on the stack (a pointer passed to a func
// value escapes).
func stage1(e benchEvent) benchEvent { e.out = e.id + 1; return e }
func stage2(e benchEvent) benchEvent { e.out += e.id; return e }

// claimSize is how many slots producer p claims next: up to sh.claim, and no
// more than its ids id, id+P, id+2P, … < n left (P = sh.producers).
func claimSize(sh benchShape, id, n int64) int64 {
	return min(int64(sh.claim), (n-1-id)/int64(sh.producers)+1)
}

// runProducers starts sh.producers goroutines gated on the returned start
// function, which opens the gate and waits for them all. Starting them before
// the timer keeps their goroutine and closure allocations out of allocs/op.
func runProducers(sh benchShape, n int64, body func(p int, n int64)) (start func()) {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(sh.producers)
	for p := range sh.producers {
		go func() {
			defer wg.Done()
			<-gate
			body(p, n)
		}()
	}
	return func() { close(gate); wg.Wait() }
}

// sumHandler is a last stage's state. Padded so that the handlers of one
// pipeline, allocated next to each other and written by different goroutines,
// do not share a cache line. batches counts Handle calls: the mean batch
// length (events/batch) tells how often the consumer caught up with the
// producers.
type sumHandler struct {
	benchResult
	_ [104]byte
}

// benchResult is what the last stage saw.
type benchResult struct{ sum, count, batches int64 }

type ringSum struct{ sumHandler }

func (h *ringSum) Handle(b ring.Batch[benchEvent]) {
	for s := b.Lo; s <= b.Hi; s++ {
		h.sum += b.At(s).out
	}
	h.count += b.Hi - b.Lo + 1
	h.batches++
}

type ringIDSum struct{ sumHandler }

func (h *ringIDSum) Handle(b ring.Batch[benchEvent]) {
	for s := b.Lo; s <= b.Hi; s++ {
		h.sum += b.At(s).id
	}
	h.count += b.Hi - b.Lo + 1
	h.batches++
}

type ringMap struct {
	f func(benchEvent) benchEvent
	_ [120]byte
}

func (h *ringMap) Handle(b ring.Batch[benchEvent]) {
	for s := b.Lo; s <= b.Hi; s++ {
		e := b.At(s)
		*e = h.f(*e)
	}
}

func benchRing(b *testing.B, sh benchShape, w ring.Wait) benchResult {
	prod := ring.SingleProducer
	if sh.producers > 1 {
		prod = ring.MultiProducer
	}
	r, err := ring.New[benchEvent](ring.Options{Size: benchSize, Producers: prod, Wait: w})
	if err != nil {
		b.Fatal(err)
	}
	var last *sumHandler
	if sh.stages == 1 {
		h := &ringIDSum{}
		r.AddStage(h, ring.StageOptions[benchEvent]{Name: "sum"})
		last = &h.sumHandler
	} else {
		s1 := r.AddStage(&ringMap{f: stage1}, ring.StageOptions[benchEvent]{Name: "stage1"})
		s2 := r.AddStage(&ringMap{f: stage2}, ring.StageOptions[benchEvent]{Name: "stage2", After: []*ring.Stage[benchEvent]{s1}})
		h := &ringSum{}
		r.AddStage(h, ring.StageOptions[benchEvent]{Name: "sum", After: []*ring.Stage[benchEvent]{s2}})
		last = &h.sumHandler
	}
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	start := runProducers(sh, int64(b.N), func(p int, n int64) {
		for id := int64(p); id < n; { // producer p: ids p, p+P, p+2P, … < n
			k := claimSize(sh, id, n)
			hi, err := r.Claim(int(k))
			if err != nil {
				panic(err) // BUG: the ring closes only after the producers finish
			}
			lo := hi - k + 1
			for s := lo; s <= hi; s++ {
				*r.At(s) = benchEvent{id: id}
				id += int64(sh.producers)
			}
			r.Publish(lo, hi)
		}
	})
	b.ResetTimer()
	start()
	if err := r.Close(); err != nil { // drains every stage and waits for their goroutines
		b.Fatal(err)
	}
	b.StopTimer()
	return last.benchResult
}

// go-disruptor: the ring buffer is ours to allocate; its handlers get
// sequence ranges.

type disruptorBuf struct {
	slots []benchEvent
	mask  int64
}

func (d *disruptorBuf) at(seq int64) *benchEvent { return &d.slots[seq&d.mask] }

type disruptorIDSum struct {
	sumHandler
	buf *disruptorBuf
}

func (h *disruptorIDSum) Handle(lo, hi int64) {
	for s := lo; s <= hi; s++ {
		h.sum += h.buf.at(s).id
	}
	h.count += hi - lo + 1
	h.batches++
}

type disruptorSum struct {
	sumHandler
	buf *disruptorBuf
}

func (h *disruptorSum) Handle(lo, hi int64) {
	for s := lo; s <= hi; s++ {
		h.sum += h.buf.at(s).out
	}
	h.count += hi - lo + 1
	h.batches++
}

type disruptorMap struct {
	f   func(benchEvent) benchEvent
	buf *disruptorBuf
	_   [112]byte
}

func (h *disruptorMap) Handle(lo, hi int64) {
	for s := lo; s <= hi; s++ {
		e := h.buf.at(s)
		*e = h.f(*e)
	}
}

func benchDisruptor(b *testing.B, sh benchShape) benchResult {
	buf := &disruptorBuf{slots: make([]benchEvent, benchSize), mask: benchSize - 1}
	var last *sumHandler
	var handlers []disruptor.Handler
	if sh.stages == 1 {
		h := &disruptorIDSum{buf: buf}
		handlers = append(handlers, h)
		last = &h.sumHandler
	} else {
		h := &disruptorSum{buf: buf}
		handlers = append(handlers, &disruptorMap{f: stage1, buf: buf}, &disruptorMap{f: stage2, buf: buf}, h)
		last = &h.sumHandler
	}
	d, err := newDisruptor(sh.producers, handlers...)
	if err != nil {
		b.Fatal(err)
	}
	listening := make(chan struct{})
	go func() { defer close(listening); d.Listen() }()
	start := runProducers(sh, int64(b.N), func(p int, n int64) {
		for id := int64(p); id < n; {
			k := claimSize(sh, id, n)
			hi := d.Reserve(uint32(k))
			lo := hi - k + 1
			for s := lo; s <= hi; s++ {
				*buf.at(s) = benchEvent{id: id}
				id += int64(sh.producers)
			}
			d.Commit(lo, hi)
		}
	})
	b.ResetTimer()
	start()
	d.Close()   // the listeners return once idle and closed: after the last committed event
	<-listening // every listener goroutine has returned: none spins into the next row
	b.StopTimer()
	return last.benchResult
}

// newDisruptor builds a go-disruptor of benchSize slots with its default wait
// strategy, for writers concurrent producers, with one handler group per
// handler so that the handlers run in sequence.
func newDisruptor(writers int, handlers ...disruptor.Handler) (disruptor.Disruptor, error) {
	opts := options(disruptor.Options.BufferCapacity(benchSize), disruptor.Options.WriterCount(uint8(writers)))
	for _, h := range handlers {
		opts = append(opts, disruptor.Options.NewHandlerGroup(h))
	}
	return disruptor.New(opts...)
}

// options collects go-disruptor options, whose type is unexported, in a slice.
func options[O any](o ...O) []O { return o }

// benchChan is the channel baseline. A channel has no batch claim: "claim 16"
// sends 16 events one by one, so its claim-1 and claim-16 rows differ only in
// loop shape. The 4 producers send on the same channel; the pipeline is three
// goroutines chained by two more channels.
func benchChan(b *testing.B, sh benchShape) benchResult {
	var sum, count int64
	in := make(chan benchEvent, benchSize)
	last := in
	for _, f := range []func(benchEvent) benchEvent{stage1, stage2}[:sh.stages-1] {
		src, dst := last, make(chan benchEvent, benchSize)
		go func() {
			defer close(dst)
			for e := range src {
				dst <- f(e)
			}
		}()
		last = dst
	}
	done := make(chan struct{})
	go func() { // the last stage; it returns after the upstream goroutines
		defer close(done)
		for e := range last {
			if sh.stages == 1 {
				sum += e.id
			} else {
				sum += e.out
			}
			count++
		}
	}()
	start := runProducers(sh, int64(b.N), func(p int, n int64) {
		for id := int64(p); id < n; {
			for k := claimSize(sh, id, n); k > 0; k-- {
				in <- benchEvent{id: id}
				id += int64(sh.producers)
			}
		}
	})
	b.ResetTimer()
	start()
	close(in)
	<-done
	b.StopTimer()
	return benchResult{sum: sum, count: count, batches: count} // a receive is a batch of one
}
