package stages

import (
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/hongbao-io/hongbao/proto"
)

// TestAnswersAgainstAMap drives the answers table with puts and lookups of
// clustered keys (few users, ids colliding in their low bits) as time
// passes, and checks every lookup against a map of what is inside the
// window: an entry is found exactly while its id is inside the window, with
// the answer it was put with, across growth, wrap-around and deletions by
// backward shift.
func TestAnswersAgainstAMap(t *testing.T) {
	const window = 5 // seconds
	rnd := rand.New(rand.NewPCG(1, 2))
	a := newAnswers(window*time.Second, nil)
	type key struct {
		user uint32
		req  uint64
	}
	model := map[key]answer{}
	now := int64(1_800_000_000)
	for step := range 200_000 {
		if step%500 == 0 {
			now++
			for k := range model {
				if a.outside(k.req, now) {
					delete(model, k)
				}
			}
		}
		k := key{uint32(rnd.IntN(8) + 1), proto.NewRequestID(now-int64(rnd.IntN(window)), uint32(rnd.IntN(64)))}
		got := a.get(k.user, k.req)
		want, ok := model[k]
		if a.outside(k.req, now) {
			continue // refused before any lookup: the table may or may not still hold it
		}
		switch {
		case ok != (got != nil):
			t.Fatalf("step %d: user %d req %#x: found %v, want %v", step, k.user, k.req, got != nil, ok)
		case ok && *got != want:
			t.Fatalf("step %d: user %d req %#x: %+v, want %+v", step, k.user, k.req, *got, want)
		case !ok:
			e := answer{req: k.req, user: k.user, env: rnd.Uint64(), amount: rnd.Uint32(), typ: proto.Shake, status: proto.ShakeGot}
			a.put(e, now)
			model[k] = e
		}
		if a.len() < len(model) {
			t.Fatalf("step %d: %d answers kept, %d inside the window", step, a.len(), len(model))
		}
	}
	if a.len() > 2*len(model)+64 {
		t.Errorf("%d answers kept for %d inside the window: the expired ones are not forgotten", a.len(), len(model))
	}
}

// TestAnswersSnapshotRoundTrip: what appendTo writes, load reads back, in
// order; a part that repeats an answer is refused.
func TestAnswersSnapshotRoundTrip(t *testing.T) {
	a := newAnswers(time.Minute, nil)
	for i := range 100 {
		a.put(answer{req: proto.NewRequestID(1_800_000_000, uint32(i)), user: uint32(i%7 + 1), env: uint64(i), amount: uint32(i), typ: proto.Open}, 0)
	}
	b := a.appendTo(nil)
	var c answers = newAnswers(time.Minute, nil)
	if err := c.load(&reader{b: b}); err != nil {
		t.Fatal(err)
	}
	if string(c.appendTo(nil)) != string(b) {
		t.Fatal("loaded answers write another part")
	}
	if err := c.load(&reader{b: b}); err == nil {
		t.Fatal("a part with answers already kept was loaded")
	}
}

// TestAnswersAllocs: in steady state, a put that forgets as many answers
// as it keeps allocates nothing.
func TestAnswersAllocs(t *testing.T) {
	a := newAnswers(2*time.Second, nil)
	now, n := int64(1_800_000_000), uint32(0)
	step := func() {
		n++
		if n%100 == 0 {
			now++
		}
		a.put(answer{req: proto.NewRequestID(now, n), user: n%1000 + 1}, now)
		a.get(n%1000+1, proto.NewRequestID(now, n))
	}
	for range 10_000 {
		step()
	}
	if allocs := testing.AllocsPerRun(10_000, step); allocs != 0 {
		t.Errorf("%.2f allocations per put and get; want 0", allocs)
	}
}

// TestAnswersReturned: an envelope back in the pool is no longer the answer
// kept for the request that took it: a retry finds none and is served as
// new, its new answer kept; the forgotten one leaves snapshots and, in its
// turn, the FIFO.
func TestAnswersReturned(t *testing.T) {
	a := newAnswers(time.Minute, nil)
	id := proto.NewRequestID(1_800_000_000, 1)
	a.put(answer{req: id, user: 3, env: 1<<63 | 7, amount: 50, typ: proto.Shake, status: proto.ShakeGot}, 0)
	a.returned(1<<63 | 8) // another envelope: nothing
	if e := a.get(3, id); e == nil || e.status != proto.ShakeGot {
		t.Fatalf("after another envelope's return: %+v", e)
	}
	a.returned(1<<63 | 7)
	if e := a.get(3, id); e != nil {
		t.Fatalf("after its envelope's return: %+v; want none", e)
	}
	a.put(answer{req: id, user: 3, env: 1<<63 | 9, amount: 60, typ: proto.Shake, status: proto.ShakeGot}, 0)
	if e := a.get(3, id); e == nil || e.env != 1<<63|9 {
		t.Fatalf("the retry's answer: %+v", e)
	}
	var b answers = newAnswers(time.Minute, nil)
	if err := b.load(&reader{b: a.appendTo(nil)}); err != nil || b.len() != 1 {
		t.Fatalf("a snapshot of it: %d answers, %v; want the retry's alone", b.len(), err)
	}
	for a.len() > 0 { // both leave in their turn: the index stays whole
		a.drop()
	}
	if e := a.get(3, id); e != nil {
		t.Fatalf("after both left: %+v", e)
	}
}

// TestAnswersBoundsMemory: the table's arrays per answer kept, at 100,000
// answers: at most 96 bytes (48 per slot, and a table that doubles).
func TestAnswersBoundsMemory(t *testing.T) {
	a := newAnswers(time.Minute, nil)
	const n = 100_000
	for i := range n {
		a.put(answer{req: proto.NewRequestID(1_800_000_000, uint32(i)), user: uint32(i%1000 + 1)}, 0)
	}
	bytes := cap(a.fifo)*int(unsafe.Sizeof(answer{})) + cap(a.index)*int(unsafe.Sizeof(uint64(0)))
	per := float64(bytes) / n
	t.Logf("%d answers: %d B, %.1f B an answer", n, bytes, per)
	if per > 96 {
		t.Errorf("%.1f B an answer; want at most 96", per)
	}
}
