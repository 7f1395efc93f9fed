package loadclient

import (
	"fmt"
	"net"
	"time"

	"hongbao/proto"
)

// Conn is a small blocking protocol client for tests and tools: one connection, frames
// written whole, answers read one at a time. It is not the load generator (that is Run) and
// is not safe for concurrent use.
type Conn struct {
	net.Conn
	buf []byte // bytes read and not yet decoded

	// Owner is the address the last LOGIN_ACK 3 (proto.LoginWrongGateway) named: the gateway
	// that owns the user, "" when that owner is not known now.
	Owner string
}

// Dial connects to a server's client address.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: nc}, nil
}

// Login sends LOGIN for user with token (nil without an auth secret) and returns the
// LOGIN_ACK status. With status proto.LoginWrongGateway, Owner holds the address the server
// named and the server closes the connection.
func (c *Conn) Login(user uint32, token []byte, timeout time.Duration) (status uint8, err error) {
	if err := c.Send(proto.AppendLogin(nil, uint64(time.Now().UnixNano()), user, token)); err != nil {
		return 0, err
	}
	f, err := c.Expect(proto.LoginAck, timeout)
	if err != nil {
		return 0, err
	}
	status, _ = f.LoginAck()
	if status == proto.LoginWrongGateway {
		c.Owner = string(f.LoginRedirect())
	}
	return status, nil
}

// Send writes frame (or several, concatenated) whole.
func (c *Conn) Send(frame []byte) error {
	_, err := c.Write(frame)
	return err
}

// Next returns the next frame from the server, waiting up to timeout. The frame's Body is
// valid until the next call.
func (c *Conn) Next(timeout time.Duration) (proto.Frame, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, n, err := proto.NextResponse(c.buf)
		if err != nil {
			return proto.Frame{}, err
		}
		if n > 0 {
			f.Body = append([]byte(nil), f.Body...) // outlive the shift below
			c.buf = c.buf[:copy(c.buf, c.buf[n:])]
			return f, nil
		}
		c.SetReadDeadline(deadline)
		var tmp [4096]byte
		k, err := c.Read(tmp[:])
		c.buf = append(c.buf, tmp[:k]...)
		if err != nil && k == 0 {
			return proto.Frame{}, err
		}
	}
}

// Expect returns the next frame and fails unless it is of type t.
func (c *Conn) Expect(t proto.Type, timeout time.Duration) (proto.Frame, error) {
	f, err := c.Next(timeout)
	if err != nil {
		return f, fmt.Errorf("waiting for %v: %w", t, err)
	}
	if f.Type != t {
		if f.Type == proto.Error {
			return f, fmt.Errorf("got ERROR %d; want %v", f.ErrorCode(), t)
		}
		return f, fmt.Errorf("got %v; want %v", f.Type, t)
	}
	return f, nil
}
