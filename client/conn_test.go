package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/client"
	"github.com/hongbao-io/hongbao/internal/testcert"
	"github.com/hongbao-io/hongbao/proto"
)

// A peer that stops reading cannot hold a request's write: the context's
// deadline ends it, else WriteTimeout (over net.Pipe a write waits for its
// read, as a full send buffer does).
func TestWriteDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  time.Duration // the request context's timeout; 0 none
		opt  []client.Option
	}{
		{name: "the context's deadline", ctx: 100 * time.Millisecond},
		{name: "WriteTimeout", opt: []client.Option{client.WriteTimeout(100 * time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quit := make(chan struct{})
			defer close(quit)
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				a, b := net.Pipe()
				go func() { // the peer: answers the LOGIN, then reads no more
					defer b.Close()
					buf := make([]byte, 4096)
					n, _ := b.Read(buf)
					if f, _, err := proto.NextRequest(buf[:n]); err == nil && f.Type == proto.Login {
						user, _ := f.Login()
						b.Write(proto.AppendLoginAck(nil, f.Stamp, proto.LoginOK, user))
					}
					<-quit
				}()
				return a, nil
			}
			ctx := context.Background()
			c, err := client.Dial(ctx, []string{"127.0.0.1:1"}, append(tc.opt, client.WithDialer(dial), client.NoReconnect(), client.PingInterval(0))...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Login(ctx, 5, nil); err != nil {
				t.Fatal(err)
			}
			rctx := ctx
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				rctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			done := make(chan error, 1)
			go func() { _, err := c.Ping(rctx); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, client.ErrConnLost) && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a write nobody reads: %v; want ErrConnLost or the context's deadline", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a write nobody reads held its caller past its deadline")
			}
		})
	}
}

// WithTLS speaks TLS to a gateway behind it, checking its certificate.
func TestWithTLS(t *testing.T) {
	ca := testcert.NewCA(t)
	cert, _, _ := ca.Issue(t, t.TempDir(), "gateway", x509.ExtKeyUsageServerAuth)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	g := serveGateway(t, ln, owner)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, []string{g.addr()}, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Login(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Shake(ctx); err != nil {
		t.Fatalf("a SHAKE over TLS: %v", err)
	}
	// A Client that does not trust the certificate does not connect.
	bad, err := client.Dial(ctx, []string{g.addr()}, client.WithTLS(&tls.Config{}), client.MaxReconnects(1))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		if err == nil {
			bad.Close()
		}
		t.Fatalf("dialled over TLS without trusting the gateway's certificate: %v", err)
	}
}
