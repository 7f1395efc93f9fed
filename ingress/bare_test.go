package ingress_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// bareStream is one of each request and the answers Bare mode gives them.
func bareStream(user uint32) (req []byte, check func(c *client)) {
	req = loginFrame(1, user)
	req = proto.AppendShake(req, 2)
	req = proto.AppendOpen(req, 3, 77)
	req = proto.AppendSend(req, 4, 300, []uint32{5, 6, 7})
	req = proto.AppendChat(req, 5, 9, []byte("héllo"))
	req = proto.AppendPing(req, 6)
	return req, func(c *client) {
		c.t.Helper()
		if st, u := c.expect(proto.LoginAck, 1).LoginAck(); st != proto.LoginOK || u != user {
			c.t.Fatalf("LOGIN_ACK %d user %d; want 0 user %d", st, u, user)
		}
		if st, env, amt := c.expect(proto.ShakeResult, 2).ShakeResult(); st != proto.ShakeNothing || env != 0 || amt != 0 {
			c.t.Fatalf("SHAKE_RESULT %d %d %d; want 0 0 0", st, env, amt)
		}
		if st, env, _ := c.expect(proto.OpenResult, 3).OpenResult(); st != proto.OpenNoSuch || env != 77 {
			c.t.Fatalf("OPEN_RESULT %d env %d; want 3 env 77", st, env)
		}
		if st, _ := c.expect(proto.SendAck, 4).SendAck(); st != proto.SendInvalid {
			c.t.Fatalf("SEND_ACK %d; want 1", st)
		}
		if st, to := c.expect(proto.ChatAck, 5).ChatAck(); st != proto.ChatOffline || to != 9 {
			c.t.Fatalf("CHAT_ACK %d to %d; want 1 to 9", st, to)
		}
		c.expect(proto.Pong, 6)
	}
}

func TestBare(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		ing := serve(t, ingress.Options{Mode: mode, Bare: true})

		t.Run("each type", func(t *testing.T) {
			c := dial(t, ing)
			req, check := bareStream(42)
			c.send(req)
			check(c)
		})

		t.Run("1000 frames in one write", func(t *testing.T) {
			c := dial(t, ing)
			req := loginFrame(1, 43)
			for i := range uint64(1000) {
				if i%2 == 0 {
					req = proto.AppendShake(req, 1000+i)
				} else {
					req = proto.AppendPing(req, 1000+i)
				}
			}
			c.send(req)
			c.expect(proto.LoginAck, 1)
			for i := range uint64(1000) {
				if i%2 == 0 {
					c.expect(proto.ShakeResult, 1000+i)
				} else {
					c.expect(proto.Pong, 1000+i)
				}
			}
		})

		t.Run("split at every byte", func(t *testing.T) {
			ing := serve(t, ingress.Options{Mode: mode, Bare: true}) // its own: BytesIn counts this client alone
			c := dial(t, ing)
			req, check := bareStream(44)
			for i := range req {
				c.send(req[i : i+1])
				// The server has read byte i by itself before byte i+1 is sent.
				waitFor(t, "the server to read one more byte", func() bool { return ing.Stats().BytesIn == uint64(i+1) })
			}
			check(c)
		})

		t.Run("second LOGIN", func(t *testing.T) {
			c := dial(t, ing)
			c.send(loginFrame(1, 45), proto.AppendPing(nil, 2), loginFrame(3, 45))
			c.expect(proto.LoginAck, 1)
			c.expect(proto.Pong, 2)
			c.expectError(proto.ErrCodeMalformed, 0) // stamp 0: docs/PROTOCOL.md, Stamps on ERROR
		})

		waitFor(t, "every connection released", func() bool { return ing.Conns() == 0 })
	})
}

func TestBareStats(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		ing := serve(t, ingress.Options{Mode: mode, Bare: true})
		c := dial(t, ing)
		req, check := bareStream(7)
		c.send(req)
		check(c)
		c.nc.Close()
		s := waitStats(t, ing, "the close", func(s ingress.Stats) bool { return s.Closed == 1 })
		if s.Accepted != 1 || s.Logins != 1 || s.BytesIn != uint64(len(req)) || s.Reads < 2 {
			t.Errorf("got %+v; want 1 accepted, 1 login, %d bytes in, ≥ 2 reads", s, len(req))
		}
		for _, typ := range []proto.Type{proto.Login, proto.Shake, proto.Open, proto.Send, proto.Chat, proto.Ping} {
			if s.Frames.Of(typ) != 1 {
				t.Errorf("Frames.Of(%v) = %d; want 1", typ, s.Frames.Of(typ))
			}
		}
		if ing.Conns() != 0 {
			t.Errorf("Conns() = %d after the close; want 0", ing.Conns())
		}
	})
}
