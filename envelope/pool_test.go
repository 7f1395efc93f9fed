package envelope

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

func TestPoolBlockSize(t *testing.T) {
	if got := unsafe.Sizeof(poolBlock{}); got != 32768 {
		t.Fatalf("poolBlock is %d bytes; want 32768, Go's largest small size class", got)
	}
}

func TestPoolZeroValue(t *testing.T) {
	var p Pool
	if id, amount, ok := p.Pop(); ok || id != 0 || amount != 0 {
		t.Fatalf("empty Pop got (%d, %d, %v); want (0, 0, false)", id, amount, ok)
	}
	if p.Len() != 0 || p.Amount() != 0 || p.head != nil || p.free != nil {
		t.Fatalf("zero Pool: Len %d Amount %d head %p free %p", p.Len(), p.Amount(), p.head, p.free)
	}
}

func TestPoolFIFO(t *testing.T) {
	var p Pool
	const n = 3*blockLen + 17
	var sum uint64
	for i := range uint64(n) {
		p.Push(i+1, uint32(i%1000))
		sum += i % 1000
	}
	if p.Len() != n || p.Amount() != sum {
		t.Fatalf("got Len %d Amount %d; want %d, %d", p.Len(), p.Amount(), n, sum)
	}
	for i := range uint64(n) {
		id, amount, ok := p.Pop()
		if !ok || id != i+1 || amount != uint32(i%1000) {
			t.Fatalf("Pop %d: got (%d, %d, %v); want (%d, %d, true)", i, id, amount, ok, i+1, i%1000)
		}
	}
	if _, _, ok := p.Pop(); ok || p.Len() != 0 || p.Amount() != 0 {
		t.Fatalf("drained pool: ok %v Len %d Amount %d", ok, p.Len(), p.Amount())
	}
}

// TestPoolModel interleaves Push, PushBatch and Pop at random against a
// slice, crossing block boundaries and draining to empty many times.
func TestPoolModel(t *testing.T) {
	type env struct {
		id     uint64
		amount uint32
	}
	src := rand.New(rand.NewPCG(1, 1))
	var p Pool
	var model []env
	var sum uint64
	var next uint64 = 1
	ids := make([]uint64, 0, 300)
	amounts := make([]uint32, 0, 300)
	for step := range 200000 {
		switch op := src.IntN(10); {
		case op < 3:
			a := src.Uint32()
			p.Push(next, a)
			model = append(model, env{next, a})
			sum += uint64(a)
			next++
		case op < 5:
			ids, amounts = ids[:0], amounts[:0]
			for range src.IntN(300) {
				a := src.Uint32N(20000)
				ids, amounts = append(ids, next), append(amounts, a)
				model = append(model, env{next, a})
				sum += uint64(a)
				next++
			}
			p.PushBatch(ids, amounts)
		default:
			for range src.IntN(200) {
				id, a, ok := p.Pop()
				if len(model) == 0 {
					if ok {
						t.Fatalf("step %d: Pop from empty got (%d, %d)", step, id, a)
					}
					break
				}
				if want := model[0]; !ok || id != want.id || a != want.amount {
					t.Fatalf("step %d: Pop got (%d, %d, %v); want (%d, %d, true)", step, id, a, ok, want.id, want.amount)
				}
				model = model[1:]
				sum -= uint64(a)
			}
		}
		if p.Len() != len(model) || p.Amount() != sum {
			t.Fatalf("step %d: Len %d Amount %d; want %d, %d", step, p.Len(), p.Amount(), len(model), sum)
		}
	}
}

// TestPoolDrainedKeepsLittle: an idle pool keeps its current block and one
// spare, whatever it held before.
func TestPoolDrainedKeepsLittle(t *testing.T) {
	var p Pool
	for i := range uint64(10 * blockLen) {
		p.Push(i+1, 1)
	}
	for range 10 * blockLen {
		p.Pop()
	}
	blocks := 0
	for b := p.head; b != nil; b = b.next {
		blocks++
	}
	for b := p.free; b != nil; b = b.next {
		blocks++
	}
	if blocks > 1+maxFreeBlocks {
		t.Fatalf("drained pool holds %d blocks; want ≤ %d", blocks, 1+maxFreeBlocks)
	}
}

func TestPoolSteadyStateAllocs(t *testing.T) {
	var p Pool
	ids := make([]uint64, 64)
	amounts := make([]uint32, 64)
	for i := range ids {
		ids[i], amounts[i] = uint64(i+1), uint32(i+1)
	}
	for range blockLen + 100 { // a queue that spans blocks
		p.Push(1, 1)
	}
	for range 2 * blockLen / 64 { // warm the free list
		p.PushBatch(ids, amounts)
		for range 64 {
			p.Pop()
		}
	}
	if a := testing.AllocsPerRun(1000, func() { // 64,000 envelopes through, ~23 blocks
		p.PushBatch(ids, amounts)
		p.Push(7, 7)
		for range 65 {
			p.Pop()
		}
	}); a != 0 {
		t.Fatalf("got %v allocs a round; want 0", a)
	}
}

func TestPushBatchMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("PushBatch with different lengths did not panic")
		}
	}()
	var p Pool
	p.PushBatch(make([]uint64, 2), make([]uint32, 1))
}

// TestPoolMemory measures the heap that 10,000,000 waiting envelopes take.
func TestPoolMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~120 MB")
	}
	const n = 10_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := new(Pool)
	for i := range uint64(n) {
		p.Push(i+1, uint32(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEnvelope := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%d envelopes: %.1f MB heap, %.2f bytes an envelope", n, float64(after.HeapAlloc-before.HeapAlloc)/1e6, perEnvelope)
	if perEnvelope > 40 {
		t.Fatalf("got %.2f bytes an envelope; want ≤ 40", perEnvelope)
	}
	if p.Len() != n {
		t.Fatalf("Len %d; want %d", p.Len(), n)
	}
	runtime.KeepAlive(p)
}

// BenchmarkPool pushes a ring event's batch and pops it one by one, beside a
// slice used as a queue.
func BenchmarkPool(b *testing.B) {
	ids := make([]uint64, 64)
	amounts := make([]uint32, 64)
	b.Run("Pool", func(b *testing.B) {
		b.ReportAllocs()
		var p Pool
		for b.Loop() {
			p.PushBatch(ids, amounts)
			for range 64 {
				p.Pop()
			}
		}
	})
	b.Run("slice", func(b *testing.B) {
		type env struct {
			id     uint64
			amount uint32
		}
		b.ReportAllocs()
		var q []env
		for b.Loop() {
			for i := range ids {
				q = append(q, env{ids[i], amounts[i]})
			}
			for range 64 {
				_ = q[0]
				q = q[1:]
			}
		}
	})
}

// TestPoolEach: Each visits the pool in pop order, across blocks.
func TestPoolEach(t *testing.T) {
	var p Pool
	for i := range 3 * blockLen {
		p.Push(uint64(i), uint32(i))
	}
	for range blockLen + 5 {
		p.Pop()
	}
	next := uint64(blockLen + 5)
	p.Each(func(id uint64, amount uint32) {
		if id != next || amount != uint32(next) {
			t.Fatalf("Each visited %d (%d); want %d", id, amount, next)
		}
		next++
	})
	if next != 3*blockLen {
		t.Fatalf("Each stopped at %d; want %d", next, 3*blockLen)
	}
}
