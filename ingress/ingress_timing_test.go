package ingress_test

import (
	"testing"

	"github.com/hongbao-io/hongbao/ingress"
	"github.com/hongbao-io/hongbao/proto"
)

// BenchmarkBarePing measures a PING's round trip through Bare mode over
// loopback TCP, 64 in flight per connection, epoll beside netpoll.
func BenchmarkBarePing(b *testing.B) {
	const batch = 64
	for _, mode := range []string{ingress.ModeEpoll, ingress.ModeNetpoll} {
		b.Run(mode, func(b *testing.B) {
			ing := serve(b, ingress.Options{Mode: mode, Bare: true})
			c := dial(b, ing)
			c.send(loginFrame(1, 1))
			c.expect(proto.LoginAck, 1)
			var req []byte
			for i := range uint64(batch) {
				req = proto.AppendPing(req, i)
			}
			resp := make([]byte, batch*proto.PongLen)
			b.SetBytes(proto.PingLen)
			b.ReportAllocs()
			for i := 0; i < b.N; i += batch {
				if _, err := c.nc.Write(req); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < len(resp); {
					n, err := c.nc.Read(resp[got:])
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}
