//go:build linux

package loadclient

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hongbao-io/hongbao/proto"
)

// TestLoopAllocs checks that the per-message work of a loop allocates nothing once warm:
// answering a SHAKE_RESULT, opening a pushed ENVELOPE until its OPEN's final answer (sent
// again after OPEN_RESULT 5 too), and sending a scheduled SHAKE and the paced SENDs and CHATs.
func TestLoopAllocs(t *testing.T) {
	cfg := &Config{Users: Range{1, 10}, QPS: 1000, Duration: time.Minute, SendRate: 1000, ChatRate: 1000}
	cfg.Fill()
	plan, err := newRunPlan(cfg, time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLoop(0, plan, Range{1, 10})
	if err != nil {
		t.Fatal(err)
	}
	c := &l.conns[3]
	c.fd = 1 << 30 // never written: the test only fills the output buffer
	l.setState(c, stReady)
	l.now = time.Now().UnixNano()
	result := proto.AppendShakeResult(nil, uint64(l.now-1000), proto.ShakeGot, 9, 77)
	push := proto.AppendEnvelope(nil, 1, 10, 0, 100, 1)
	f := func(name string, frame []byte) {
		t.Helper()
		fr, _, err := proto.NextResponse(frame)
		if err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			c.inflight[reqShake] = 1
			l.handle(c, 3, fr)
			if c.out != nil {
				*c.out = (*c.out)[:0]
			}
			c.flags &^= fDirty
			l.dirty = l.dirty[:0]
		})
		if allocs != 0 {
			t.Errorf("%s: got %v allocations; want 0", name, allocs)
		}
	}
	f("SHAKE_RESULT", result)
	f("ENVELOPE", push)
	frame := func(b []byte) proto.Frame {
		fr, _, err := proto.NextResponse(b)
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	stamp := uint64(l.now - 1000)
	push11, ok11 := frame(proto.AppendEnvelope(nil, 1, 11, 0, 100, 1)), frame(proto.AppendOpenResult(nil, stamp, proto.OpenOK, 11, 5))
	push12, busy12 := frame(proto.AppendEnvelope(nil, 1, 12, 0, 100, 1)), frame(proto.AppendOpenResult(nil, stamp, proto.OpenOverloaded, 12, 0))
	again12 := frame(proto.AppendOpenResult(nil, stamp, proto.OpenAlready, 12, 7))
	opened := func() {
		if c.out != nil {
			*c.out = (*c.out)[:0]
		}
		c.flags &^= fDirty
		l.dirty = l.dirty[:0]
	}
	allocs := testing.AllocsPerRun(1000, func() {
		l.handle(c, 3, push11)
		l.handle(c, 3, ok11)
		l.handle(c, 3, push12)
		l.handle(c, 3, busy12)
		l.now += int64(openRetryMin + openRetryJitter) // the wait after 5 is over
		l.openDue()
		l.now -= int64(openRetryMin + openRetryJitter) // and the stamps stay the loop's
		l.handle(c, 3, again12)
		opened()
	})
	if allocs != 0 {
		t.Errorf("ENVELOPE, OPEN_RESULT 0; ENVELOPE, OPEN_RESULT 5, again, OPEN_RESULT 1: got %v allocations; want 0", allocs)
	}
	if n := uint64(1001); l.c.Resent != n || l.c.Learned != n || l.c.LearnedAmount != 7*n || l.c.OpenAmount != 12*n || l.opens.n != 1 || l.c.Errors[errProtocol] != 0 {
		t.Errorf("resent %d, learned %d (%d fen), OPEN money %d, opens under way %d, protocol errors %d; want %d, %d (%d), %d, 1 (envelope 10's), 0",
			l.c.Resent, l.c.Learned, l.c.LearnedAmount, l.c.OpenAmount, l.opens.n, l.c.Errors[errProtocol], n, n, 7*n, 12*n)
	}
	if got := l.c.ShakeAmount; got == 0 || got%77 != 0 {
		t.Errorf("SHAKE amounts summed to %d; want a multiple of 77", got)
	}
	if l.c.Sent[reqOpen] == 0 {
		t.Error("no OPEN sent for the pushes")
	}
	allocs = testing.AllocsPerRun(1000, func() {
		l.now += int64(time.Millisecond)
		l.sendDue()
		for _, idx := range l.dirty {
			cc := &l.conns[idx]
			cc.flags &^= fDirty
			if cc.out != nil {
				*cc.out = (*cc.out)[:0]
			}
		}
		l.dirty = l.dirty[:0]
	})
	if allocs != 0 {
		t.Errorf("sendDue: got %v allocations; want 0", allocs)
	}
	if l.c.Sent[reqSend] == 0 || l.c.Sent[reqChat] == 0 {
		t.Errorf("sendDue sent %d SENDs and %d CHATs; want some of each", l.c.Sent[reqSend], l.c.Sent[reqChat])
	}
	c.fd = -1
	unix.Close(l.evfd)
	unix.Close(l.ep)
}

// TestConnSize keeps the per-user state small: it is most of the client's memory per user.
func TestConnSize(t *testing.T) {
	if got := unsafe.Sizeof(uconn{}); got > 48 {
		t.Errorf("uconn is %d bytes; want at most 48", got)
	}
}
