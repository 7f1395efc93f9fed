package harness

import (
	"bufio"
	"fmt"
	"net"
	"time"

	"hongbao/proto"
)

// Conn is one logged-in user on a plain TCP connection of the tool's own,
// for the probes and measurements that must know which server a request
// goes to and what it answered. One goroutine writes, one reads.
type Conn struct {
	User   uint32
	NC     net.Conn
	r      *bufio.Reader
	buf    []byte
	Pushed []uint64 // the envelopes of the ENVELOPE pushes Answer passed over
}

// Dial connects user to addr and logs in; LOGIN_ACK must be 0.
func Dial(addr string, user uint32) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &Conn{User: user, NC: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if _, err := nc.Write(proto.AppendLogin(nil, 1, user, nil)); err != nil {
		nc.Close()
		return nil, err
	}
	f, err := c.Expect(proto.LoginAck, 10*time.Second)
	if err == nil {
		if st, _ := f.LoginAck(); st != proto.LoginOK {
			err = fmt.Errorf("LOGIN_ACK %d", st)
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("user %d at %s: %w", user, addr, err)
	}
	return c, nil
}

// Next reads the next frame; its body is valid until the next call.
func (c *Conn) Next() (proto.Frame, error) {
	for {
		f, n, err := proto.NextResponse(c.buf)
		if err != nil {
			return f, err
		}
		if n > 0 {
			c.buf = c.buf[n:]
			return f, nil
		}
		if cap(c.buf)-len(c.buf) < 4096 { // a frame is at most a few KiB
			c.buf = append(make([]byte, 0, 64<<10), c.buf...)
		}
		m, err := c.r.Read(c.buf[len(c.buf):cap(c.buf)])
		if err != nil {
			return proto.Frame{}, err
		}
		c.buf = c.buf[:len(c.buf)+m]
	}
}

// Expect reads frames until one of type t, dropping pushes and other
// answers, within d.
func (c *Conn) Expect(t proto.Type, d time.Duration) (proto.Frame, error) {
	c.NC.SetReadDeadline(time.Now().Add(d))
	defer c.NC.SetReadDeadline(time.Time{})
	for {
		f, err := c.Next()
		if err != nil || f.Type == t {
			return f, err
		}
	}
}

// Answer reads frames until the answer stamped stamp, within d per read:
// it keeps the envelopes pushed meanwhile in Pushed, passes over other
// answers, and fails on an ERROR frame.
func (c *Conn) Answer(stamp uint64, d time.Duration) (proto.Frame, error) {
	c.NC.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.Next()
		switch {
		case err != nil:
			return f, err
		case f.Type == proto.Error:
			return f, fmt.Errorf("ERROR %d", f.ErrorCode())
		case f.Type == proto.Envelope && len(f.Body) >= 18:
			env, _, _, _ := f.Envelope()
			c.Pushed = append(c.Pushed, env)
		case f.Stamp == stamp:
			return f, nil
		}
	}
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }
