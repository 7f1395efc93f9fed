package server_test

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/loadclient"
	"github.com/hongbao-io/hongbao/proto"
)

// The overload's load generator: connections that send SHAKEs open loop at a
// rate (or keep a window full) and read every answer, timing the served ones.

// blaster is one connection of TestOverload: a writer that sends SHAKEs at
// a pace (or keeps a window full) and a reader that takes every answer.
type blaster struct {
	nc       net.Conn
	inflight atomic.Int64
	sent     atomic.Int64
	served   atomic.Int64                   // SHAKE_RESULT 0 or 1
	refused  atomic.Int64                   // SHAKE_RESULT 2
	amount   uint64                         // reader's
	lat      [2]loadclient.LatencyHistogram // served answers, ns from the send: first and second half of the blast
	half     atomic.Int64                   // unix ns from which answers count in lat[1]
	written  atomic.Bool                    // the writer has stopped: the reader ends with the window empty
	werr     error                          // the writer's
	rerr     error                          // the reader's
}

// write sends SHAKEs stamped with their scheduled send time: rate a second
// from start (open loop, never more than limit in flight), or with rate 0
// keeping limit in flight (closed loop); until stop.
func (b *blaster) write(start time.Time, rate float64, limit int64, stop *atomic.Bool) {
	var buf []byte
	n := int64(0)
	for !stop.Load() {
		k := limit - b.inflight.Load()
		if rate > 0 {
			k = min(k, int64(time.Since(start).Seconds()*rate)-n)
		}
		k = min(k, 256)
		if k <= 0 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		buf = buf[:0]
		for i := range k {
			due := time.Now().UnixNano()
			if rate > 0 {
				due = start.UnixNano() + int64(float64(n+i)/rate*1e9)
			}
			buf = proto.AppendShake(buf, uint64(due))
		}
		b.inflight.Add(k)
		b.sent.Add(k)
		n += k
		b.nc.SetWriteDeadline(time.Now().Add(waitTime))
		if _, err := b.nc.Write(buf); err != nil {
			b.werr = err
			return
		}
	}
}

// read takes answers until the writer has stopped and none is in flight.
func (b *blaster) read() {
	buf := make([]byte, 0, 64<<10)
	progress := time.Now()
	for !b.written.Load() || b.inflight.Load() > 0 {
		b.nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) // short: to see the writer stop
		n, err := b.nc.Read(buf[len(buf):cap(buf)])
		// No answer for a while is no failure by itself: at twice the capacity
		// the backlog sits in the kernel's buffers, and on a swamped machine a
		// connection can wait more than waitTime for its turn.
		if ne, ok := err.(net.Error); ok && ne.Timeout() && n == 0 && time.Since(progress) < 3*waitTime {
			continue
		}
		if err != nil {
			b.rerr = fmt.Errorf("reading: %w (%d in flight)", err, b.inflight.Load())
			return
		}
		progress = time.Now()
		buf = buf[:len(buf)+n]
		now := time.Now().UnixNano()
		h := &b.lat[0]
		if now >= b.half.Load() {
			h = &b.lat[1]
		}
		off := 0
		for {
			f, k, err := proto.NextResponse(buf[off:])
			if err != nil || (k > 0 && f.Type != proto.ShakeResult) {
				b.rerr = fmt.Errorf("got %s (%v); want SHAKE_RESULT", describe(f), err)
				return
			}
			if k == 0 {
				break
			}
			off += k
			b.inflight.Add(-1)
			switch st, _, amount := f.ShakeResult(); st {
			case proto.ShakeOverloaded:
				b.refused.Add(1)
			case proto.ShakeGot, proto.ShakeNothing:
				b.served.Add(1)
				b.amount += uint64(amount)
				h.Record(now - int64(f.Stamp))
			default:
				b.rerr = fmt.Errorf("SHAKE_RESULT status %d", st)
				return
			}
		}
		buf = buf[:copy(buf, buf[off:])]
	}
}

// blastResult sums the blasters of one run.
type blastResult struct {
	sent, served, refused int64
	amount                uint64
	lat                   [2]*loadclient.LatencyHistogram
}

// runBlast runs every blaster for d (see blaster.write for rate and limit),
// calling during about every 100 ms. It returns when the writers stopped,
// and a wait for the readers to have every answer.
func runBlast(bs []*blaster, d time.Duration, rate float64, limit int64, during func()) (stopped time.Time, wait func()) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for _, b := range bs {
		b.half.Store(start.Add(d / 2).UnixNano())
		b.written.Store(false)
		wg.Add(2)
		go func() {
			defer wg.Done()
			b.write(start, rate, limit, &stop)
			b.written.Store(true)
		}()
		go func() { defer wg.Done(); b.read() }()
	}
	for time.Since(start) < d {
		time.Sleep(100 * time.Millisecond)
		if during != nil {
			during()
		}
	}
	stop.Store(true)
	return time.Now(), wg.Wait
}

// sum adds up the blasters' figures, once they have stopped, and resets them.
func sum(t *testing.T, bs []*blaster) blastResult {
	t.Helper()
	r := blastResult{lat: [2]*loadclient.LatencyHistogram{new(loadclient.LatencyHistogram), new(loadclient.LatencyHistogram)}}
	for i, b := range bs {
		if err := errors.Join(b.werr, b.rerr); err != nil {
			t.Fatalf("overload: connection %d: %v; its two sockets: %s", i, err,
				socketQueues(b.nc.LocalAddr().(*net.TCPAddr).Port))
		}
		r.sent += b.sent.Swap(0)
		r.served += b.served.Swap(0)
		r.refused += b.refused.Swap(0)
		r.amount += b.amount
		b.amount = 0
		for h := range b.lat {
			r.lat[h].Merge(&b.lat[h])
			b.lat[h].Reset()
		}
	}
	return r
}
