package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"hongbao/proto"
)

// probe is a few users of the tool's own, each on one connection, that SHAKE
// one request at a time and now and then SEND a group envelope, recording
// every envelope id they are handed and the money they are told.
type probe struct {
	mu       sync.Mutex
	shakeIDs map[uint64]bool // SHAKE_RESULT 1
	groupIDs map[uint64]bool // SEND_ACK 0
	shakeFen uint64          // Σ SHAKE_RESULT 1 amounts
	twice    []uint64        // ids handed out twice
	errs     []error         // anything but the end of the connection
	killed   atomic.Bool     // the server is being killed: a connection's end is expected
}

func newProbe() *probe {
	return &probe{shakeIDs: map[uint64]bool{}, groupIDs: map[uint64]bool{}}
}

// run drives users until stop is closed or their connections end (the
// server killed), and returns once every one has stopped.
func (p *probe) run(addr string, users, recipients []uint32, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recipient := recipients[0]
			if recipient == u {
				recipient = recipients[1%len(recipients)]
			}
			if err := p.user(addr, u, recipient, stop); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("probe user %d: %w", u, err))
				p.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func (p *probe) user(addr string, user, recipient uint32, stop <-chan struct{}) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	go func() { <-stop; nc.SetDeadline(time.Now()) }()
	r := &frameReader{nc: nc}
	if _, err := nc.Write(proto.AppendLogin(nil, 1, user, nil)); err != nil {
		return err
	}
	f, err := r.next(0)
	if err != nil {
		return fmt.Errorf("LOGIN: %w", err)
	}
	if st, _ := f.LoginAck(); f.Type != proto.LoginAck || st != proto.LoginOK {
		return fmt.Errorf("LOGIN answered %v", f)
	}
	var out []byte
	for i := uint64(2); ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		send := i%50 == 0
		if send {
			out = proto.AppendSend(out[:0], i, 30, []uint32{recipient})
		} else {
			out = proto.AppendShake(out[:0], i)
		}
		if _, err := nc.Write(out); err != nil {
			return p.ended(err, stop)
		}
		f, err := r.next(i)
		if err != nil {
			return p.ended(err, stop)
		}
		p.mu.Lock()
		switch f.Type {
		case proto.ShakeResult:
			if st, env, amount := f.ShakeResult(); st == proto.ShakeGot {
				if p.shakeIDs[env] {
					p.twice = append(p.twice, env)
				}
				p.shakeIDs[env] = true
				p.shakeFen += uint64(amount)
			}
		case proto.SendAck:
			if st, env := f.SendAck(); st == proto.SendOK {
				if p.groupIDs[env] {
					p.twice = append(p.twice, env)
				}
				p.groupIDs[env] = true
			}
		}
		p.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// ended is nil for a connection that ended because the server was killed or
// the probe was stopped: that is how every probe ends.
func (p *probe) ended(err error, stop <-chan struct{}) error {
	select {
	case <-stop:
		return nil
	default:
	}
	if p.killed.Load() {
		return nil
	}
	return err
}

// frameReader reads the server's frames off one connection.
type frameReader struct {
	nc  net.Conn
	buf []byte
}

// next returns the answer to stamp (0: the next frame), skipping pushes and
// frames of other stamps; a read waits at most 30 s.
func (r *frameReader) next(stamp uint64) (proto.Frame, error) {
	r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f, n, err := proto.NextResponse(r.buf)
		if err != nil {
			return f, err
		}
		if n > 0 {
			f.Body = append([]byte(nil), f.Body...)
			r.buf = r.buf[:copy(r.buf, r.buf[n:])]
			if f.Type == proto.Error {
				return f, fmt.Errorf("ERROR %d", f.ErrorCode())
			}
			if stamp == 0 || f.Stamp == stamp {
				return f, nil
			}
			continue
		}
		var tmp [4096]byte
		k, err := r.nc.Read(tmp[:])
		r.buf = append(r.buf, tmp[:k]...)
		if k == 0 && err != nil {
			return proto.Frame{}, err
		}
	}
}

// disjoint lists the ids of b that a also holds.
func disjoint(a, b map[uint64]bool) []uint64 {
	var both []uint64
	for id := range b {
		if a[id] {
			both = append(both, id)
		}
	}
	return both
}
