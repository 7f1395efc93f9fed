// Package wire is one connection speaking the wire protocol frame by frame
// (docs/PROTOCOL.md): for the tests, probes and witnesses that must choose
// the server a request goes to, the stamp it carries and the bytes it is
// made of, and read what was answered. Applications use package client;
// the load generator has its engine of its own (package loadclient).
package wire

import (
	"fmt"
	"net"
	"time"

	"github.com/hongbao-io/hongbao/proto"
)

// Conn is one connection: frames written whole, answers read one at a
// time. It is not safe for concurrent use, but for one goroutine writing
// (Send, Write) beside one reading.
type Conn struct {
	net.Conn
	// User is the user LOGIN logged in, 0 before.
	User uint32
	// Owner is the address the last LOGIN_ACK 3 (proto.LoginWrongGateway)
	// named: the gateway that owns the user, "" when that owner is not
	// known now.
	Owner string
	// Pushed holds the envelopes of the ENVELOPE pushes Answer passed over.
	Pushed []uint64

	buf []byte // bytes read and not yet decoded
}

// Dial connects to a server's client address.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: nc}, nil
}

// DialLogin connects user to addr and logs it in without a token, within
// 5 s to connect and 10 s for LOGIN_ACK, which must be 0.
func DialLogin(addr string, user uint32) (*Conn, error) {
	c, err := Dial(addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	st, err := c.Login(user, nil, 10*time.Second)
	if err == nil && st != proto.LoginOK {
		err = fmt.Errorf("LOGIN_ACK %d", st)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("user %d at %s: %w", user, addr, err)
	}
	return c, nil
}

// Login sends LOGIN for user with token (nil without an auth secret) and
// returns the LOGIN_ACK status. With status proto.LoginWrongGateway, Owner
// holds the address the server named and the server closes the connection.
func (c *Conn) Login(user uint32, token []byte, timeout time.Duration) (status uint8, err error) {
	if err := c.Send(proto.AppendLogin(nil, uint64(time.Now().UnixNano()), user, token)); err != nil {
		return 0, err
	}
	f, err := c.Expect(proto.LoginAck, timeout)
	if err != nil {
		return 0, err
	}
	status, _ = f.LoginAck()
	switch status {
	case proto.LoginOK:
		c.User = user
	case proto.LoginWrongGateway:
		c.Owner = string(f.LoginRedirect())
	}
	return status, nil
}

// Send writes frame (or several, concatenated) whole.
func (c *Conn) Send(frame []byte) error {
	_, err := c.Write(frame)
	return err
}

// Next returns the next frame from the server, waiting up to timeout. The
// frame's Body is its own.
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

// Await reads frames until one of type t, dropping pushes and other
// answers, all within timeout.
func (c *Conn) Await(t proto.Type, timeout time.Duration) (proto.Frame, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := c.Next(time.Until(deadline))
		if err != nil || f.Type == t {
			return f, err
		}
	}
}

// Answer reads frames until the answer stamped stamp, all within timeout:
// it keeps the envelopes pushed meanwhile in Pushed, passes over other
// answers, and fails on an ERROR frame.
func (c *Conn) Answer(stamp uint64, timeout time.Duration) (proto.Frame, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := c.Next(time.Until(deadline))
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
