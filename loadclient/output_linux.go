//go:build linux

package loadclient

import "golang.org/x/sys/unix"

// Output: the borrowed buffers requests are appended to, and the one write per connection
// per round that sends them.

// bufPool is a loop's free list of borrowed buffers: a connection holds one only while it
// has a partial frame read or output unwritten.
type bufPool struct {
	free []*[]byte
}

func (p *bufPool) getBuf() *[]byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	b := make([]byte, 0, 256)
	return &b
}

func (p *bufPool) putBuf(b *[]byte) {
	if cap(*b) > keepBuf {
		return
	}
	*b = (*b)[:0]
	p.free = append(p.free, b)
}

// outBuf returns c's output buffer, marking c for this round's flush; nil when c's unwritten
// output is over its limit (the request is counted as dropped).
func (l *loop) outBuf(c *uconn, idx uint32) *[]byte {
	if c.out == nil {
		c.out = l.getBuf()
	} else if len(*c.out) > maxOut {
		l.c.Backlog++
		return nil
	}
	if c.flags&fBlocked == 0 {
		l.markDirty(c, idx)
	}
	return c.out
}

func (l *loop) markDirty(c *uconn, idx uint32) {
	if c.flags&fDirty == 0 {
		c.flags |= fDirty
		l.dirty = append(l.dirty, idx)
	}
}

// sent counts a request of kind r appended to c's output.
func (l *loop) sent(c *uconn, r int) {
	if !c.waiting() {
		c.since = l.nowMs
	}
	c.inflight[r]++
	l.c.Sent[r]++
}

// flush writes each dirty connection's output with one write.
func (l *loop) flush() {
	for _, idx := range l.dirty {
		c := &l.conns[idx]
		c.flags &^= fDirty
		if c.fd < 0 || c.out == nil || c.flags&fBlocked != 0 {
			continue
		}
		out := *c.out
		n, err := unix.Write(int(c.fd), out)
		for err == unix.EINTR {
			n, err = unix.Write(int(c.fd), out)
		}
		switch {
		case err == unix.EAGAIN:
			c.flags |= fBlocked
		case err != nil:
			l.loginFailed(c, "write", err)
			l.drop(c, idx, errReset)
		case n == len(out):
			l.putBuf(c.out)
			c.out = nil
		default:
			*c.out = out[:copy(out, out[n:])]
			c.flags |= fBlocked // EPOLLOUT comes when the socket has room again
		}
	}
	l.dirty = l.dirty[:0]
}
