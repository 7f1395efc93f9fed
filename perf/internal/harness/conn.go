package harness

import (
	"bufio"
	"errors"
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
	c, _, err := login(addr, user, 5*time.Second, 10*time.Second)
	return c, err
}

// ErrNoOwner is a LOGIN_ACK 3 that names no gateway: the user's SET has no
// owner right now.
var ErrNoOwner = errors.New("LOGIN_ACK 3 naming no gateway: the SET has no owner right now")

// DialOwner connects user to addr and logs in, following LOGIN_ACK 3 to
// the gateway it names (a few hops at most), each connect and LOGIN
// within d; ErrNoOwner when a gateway names none.
func DialOwner(addr string, user uint32, d time.Duration) (*Conn, error) {
	for range 4 {
		c, next, err := login(addr, user, d, d)
		if err != nil || next == "" {
			return c, err
		}
		addr = next
	}
	return nil, fmt.Errorf("user %d: redirected more than 3 times", user)
}

// login connects user to addr and logs in: the connection on LOGIN_ACK 0,
// the address LOGIN_ACK 3 names, else an error.
func login(addr string, user uint32, connect, ack time.Duration) (*Conn, string, error) {
	nc, err := net.DialTimeout("tcp", addr, connect)
	if err != nil {
		return nil, "", err
	}
	c := &Conn{User: user, NC: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	if _, err := nc.Write(proto.AppendLogin(nil, 1, user, nil)); err != nil {
		nc.Close()
		return nil, "", err
	}
	var next string
	f, err := c.Expect(proto.LoginAck, ack)
	if err == nil {
		switch st, _ := f.LoginAck(); {
		case st == proto.LoginWrongGateway && len(f.LoginRedirect()) > 0:
			next = string(f.LoginRedirect())
		case st == proto.LoginWrongGateway:
			err = ErrNoOwner
		case st != proto.LoginOK:
			err = fmt.Errorf("LOGIN_ACK %d", st)
		}
	}
	if err != nil || next != "" {
		nc.Close()
		if err != nil {
			err = fmt.Errorf("user %d at %s: %w", user, addr, err)
		}
		return nil, next, err
	}
	return c, "", nil
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
