package main

import (
	"bufio"
	"fmt"
	"net"
	"time"

	"hongbao/proto"
)

// rawClient is one logged-in user on a plain TCP connection, for the
// measurements and tests that need to know which gateway a request goes
// to: one goroutine writes, one reads.
type rawClient struct {
	user uint32
	nc   net.Conn
	r    *bufio.Reader
	buf  []byte
}

// dialUser connects user to addr and logs in; LOGIN_ACK must be 0.
func dialUser(addr string, user uint32) (*rawClient, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawClient{user: user, nc: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if _, err := nc.Write(proto.AppendLogin(nil, 1, user, nil)); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := c.next()
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("user %d at %s: %w", user, addr, err)
	}
	if f.Type != proto.LoginAck {
		nc.Close()
		return nil, fmt.Errorf("user %d at %s: %v before LOGIN_ACK", user, addr, f.Type)
	}
	if st, _ := f.LoginAck(); st != proto.LoginOK {
		nc.Close()
		return nil, fmt.Errorf("user %d at %s: LOGIN_ACK %d", user, addr, st)
	}
	return c, nil
}

// next reads the next frame; its body is valid until the next call.
func (c *rawClient) next() (proto.Frame, error) {
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

// expect reads frames until one of type t, dropping pushes and other
// answers, within d.
func (c *rawClient) expect(t proto.Type, d time.Duration) (proto.Frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	defer c.nc.SetReadDeadline(time.Time{})
	for {
		f, err := c.next()
		if err != nil || f.Type == t {
			return f, err
		}
	}
}

func (c *rawClient) close() { c.nc.Close() }
