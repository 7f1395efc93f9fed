package ingress_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/event"
	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// header is a raw frame header with n-12 zero bytes of body.
func header(n int, typ byte, stamp uint64) []byte {
	b := make([]byte, max(n, proto.HeaderLen))
	binary.BigEndian.PutUint16(b, uint16(n))
	b[2] = typ
	binary.BigEndian.PutUint64(b[4:], stamp)
	return b
}

func TestPreLogin(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})

		t.Run("frame before LOGIN", func(t *testing.T) {
			c := dial(t, ing)
			c.send(proto.AppendShake(nil, 9))
			c.expectError(proto.ErrCodeNotLoggedIn, 9)
		})
		t.Run("user 0", func(t *testing.T) {
			c := dial(t, ing)
			c.send(loginFrame(3, 0))
			if st, _ := c.expect(proto.LoginAck, 3).LoginAck(); st != proto.LoginInvalidUser {
				t.Fatalf("LOGIN_ACK %d; want %d", st, proto.LoginInvalidUser)
			}
			c.expectClosed()
		})
		t.Run("token ignored without a secret", func(t *testing.T) {
			c := dial(t, ing)
			c.send(proto.AppendLogin(nil, 4, 11, []byte("anything")))
			c.expect(proto.LoginAck, 4)
			if x := recs[1].wait(t, event.KLogin); x.ev.User != 11 || x.ev.Stamp != 4 {
				t.Fatalf("KLogin user %d stamp %d; want 11, 4", x.ev.User, x.ev.Stamp)
			}
		})

		// Malformed first frames: the violation wins over "not logged in".
		bad := func(name string, frame []byte, code uint8) {
			t.Run(name, func(t *testing.T) {
				c := dial(t, ing)
				c.send(frame)
				c.expectError(code, 0)
			})
		}
		bad("len below 12", header(5, 0x01, 0)[:5], proto.ErrCodeMalformed)
		bad("len 0", []byte{0, 0}, proto.ErrCodeMalformed)
		bad("len above 4096", header(4097, 0x02, 0)[:12], proto.ErrCodeTooLarge)
		bad("len 65535", []byte{0xff, 0xff, 0x02}, proto.ErrCodeTooLarge)
		bad("type 0", header(12, 0x00, 0), proto.ErrCodeUnknownType)
		bad("type 7", header(12, 0x07, 0), proto.ErrCodeUnknownType)
		bad("server type as request", header(12, byte(proto.Pong), 0), proto.ErrCodeUnknownType)
		bad("LOGIN shorter than its fixed part", header(12+5, byte(proto.Login), 0), proto.ErrCodeMalformed)
		bad("OPEN without envelope", header(12, byte(proto.Open), 0), proto.ErrCodeMalformed)
		overrun := header(12+6, byte(proto.Login), 0)
		binary.BigEndian.PutUint16(overrun[12+4:], 1) // token_len 1, no room for it
		bad("LOGIN token_len past len", overrun, proto.ErrCodeMalformed)
		chat := header(12+6+1025, byte(proto.Chat), 0)
		binary.BigEndian.PutUint16(chat[12+4:], 1025)
		bad("CHAT text_len above 1024", chat, proto.ErrCodeMalformed)
		send := header(12+6+4, byte(proto.Send), 0)
		binary.BigEndian.PutUint16(send[12+4:], 2)
		bad("SEND n past len", send, proto.ErrCodeMalformed)

		waitFor(t, "every connection released", func() bool { return ing.Conns() == 0 })
		waitStats(t, ing, "2 rejected logins, 12 violations, 1 login", func(s ingress.Stats) bool {
			return s.LoginRejected == 2 && s.Violations == 12 && s.Logins == 1
		})
	})
}

func TestAuth(t *testing.T) {
	secret := []byte("the secret")
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		now := time.Now()
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, AuthSecret: secret})

		badToken := func(name string, token []byte) {
			t.Run(name, func(t *testing.T) {
				c := dial(t, ing)
				c.send(proto.AppendLogin(nil, 5, 21, token))
				if st, u := c.expect(proto.LoginAck, 5).LoginAck(); st != proto.LoginBadToken || u != 21 {
					t.Fatalf("LOGIN_ACK %d user %d; want %d user 21", st, u, proto.LoginBadToken)
				}
				c.expectClosed()
			})
		}
		badToken("no token", nil)
		badToken("expired", proto.MintToken(nil, secret, 21, now.Add(-time.Minute).Unix()))
		badToken("other user's", proto.MintToken(nil, secret, 22, now.Add(time.Minute).Unix()))
		badToken("other secret", proto.MintToken(nil, []byte("not it"), 21, now.Add(time.Minute).Unix()))
		badToken("too long", append(proto.MintToken(nil, secret, 21, now.Add(time.Minute).Unix()), 0))

		t.Run("good token", func(t *testing.T) {
			c := dial(t, ing)
			c.send(proto.AppendLogin(nil, 6, 21, proto.MintToken(nil, secret, 21, now.Add(time.Minute).Unix())))
			c.expect(proto.LoginAck, 6)
			if x := recs[1].wait(t, event.KLogin); x.ev.User != 21 || x.ev.Stamp != 6 || x.ev.Status != proto.LoginOK {
				t.Fatalf("KLogin user %d stamp %d status %d; want 21, 6, 0", x.ev.User, x.ev.Stamp, x.ev.Status)
			}
		})
	})
}

func TestLoginTimeout(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, _ := newBus(t, 2, 64, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus, LoginTimeout: 200 * time.Millisecond})
		start := time.Now()
		c := dial(t, ing)
		partial := dial(t, ing) // half a LOGIN does not count
		partial.send(loginFrame(1, 5)[:7])
		c.expectError(proto.ErrCodeLoginTimeout, 0)
		partial.expectError(proto.ErrCodeLoginTimeout, 0)
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("timed out after %v; want about 200ms", d)
		}
		waitFor(t, "both released", func() bool { return ing.Conns() == 0 })
		waitStats(t, ing, "2 login timeouts", func(s ingress.Stats) bool { return s.LoginTimeouts == 2 })
	})
}

func TestMaxConns(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		ing := serve(t, ingress.Options{Mode: mode, Bare: true, MaxConns: 2})
		a, b := dial(t, ing), dial(t, ing)
		a.send(loginFrame(1, 1))
		b.send(loginFrame(1, 2))
		a.expect(proto.LoginAck, 1)
		b.expect(proto.LoginAck, 1)
		refused := dial(t, ing)
		refused.expectClosed()
		// Counters are published once per round: poll.
		waitStats(t, ing, "1 refused, 2 accepted", func(s ingress.Stats) bool { return s.Refused == 1 && s.Accepted == 2 })
		a.nc.Close()
		waitFor(t, "a's release", func() bool { return ing.Conns() == 1 })
		c := dial(t, ing)
		c.send(loginFrame(2, 3))
		c.expect(proto.LoginAck, 2)
	})
}

func TestLifecycle(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		bus, recs := newBus(t, 2, 64, 4)
		ing := serve(t, ingress.Options{Mode: mode, Bus: bus})
		in, _ := login(t, ing, recs[1], 1, 1)
		idle := dial(t, ing)
		idle.send(loginFrame(2, 2)[:3])
		waitFor(t, "both accepted", func() bool { return ing.Stats().Accepted == 2 })

		ing.StopAccepting()
		if nc, err := net.DialTimeout("tcp", ing.Addrs()[0].String(), time.Second); err == nil {
			nc.Close()
			t.Error("dial succeeded after StopAccepting")
		}
		ing.CloseIdle(proto.ErrCodeShuttingDown)
		idle.expectError(proto.ErrCodeShuttingDown, 0)
		in.send(proto.AppendPing(nil, 3)) // the logged-in connection is its SET's to close
		if ing.Conns() != 1 {
			t.Errorf("Conns() = %d after CloseIdle; want 1", ing.Conns())
		}
		if err := ing.Close(); err != nil {
			t.Fatal(err)
		}
		// Close handed the logged-in connection to its SET (KDisconnect), whose
		// stage released it.
		waitFor(t, "the logged-in connection released", func() bool { return ing.Conns() == 0 })
		in.expectClosed()
	})
}
