package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/internal/testcert"
	"github.com/hongbao-io/hongbao/server"
)

// The admin API over TLS (-admin-tls-cert, -admin-tls-key): answered over
// TLS to a client that trusts its CA, refused in plain HTTP; with
// -admin-tls-client-ca, only to a client whose certificate chains to it.
func TestAdminTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	_, certFile, keyFile := ca.Issue(t, dir, "server", x509.ExtKeyUsageServerAuth)
	clientCert, _, _ := ca.Issue(t, dir, "client", x509.ExtKeyUsageClientAuth)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}

	start := func(clientCA string) string {
		o := server.Options{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Journal: "off", Sets: 2, Loops: 1,
			AdminTLSCert: certFile, AdminTLSKey: keyFile, AdminTLSCA: clientCA}
		o.Fill()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		s, err := server.New(o, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown(context.Background()) })
		return s.AdminAddr()
	}
	get := func(url string, cfg *tls.Config) (int, error) {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	addr := start("")
	if code, err := get("https://"+addr+"/healthz", &tls.Config{RootCAs: ca.Pool}); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %d %v; want 200", code, err)
	}
	if code, err := get("http://"+addr+"/healthz", nil); err == nil && code == http.StatusOK {
		t.Fatal("GET /healthz in plain HTTP answered 200; want it refused")
	}
	if _, err := get("https://"+addr+"/healthz", &tls.Config{}); err == nil {
		t.Fatal("a client that does not trust the server's CA got an answer")
	}

	mutual := start(caFile)
	if _, err := get("https://"+mutual+"/healthz", &tls.Config{RootCAs: ca.Pool}); err == nil {
		t.Fatal("-admin-tls-client-ca: answered a client without a certificate")
	}
	if code, err := get("https://"+mutual+"/healthz", &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{clientCert}}); err != nil || code != http.StatusOK {
		t.Fatalf("-admin-tls-client-ca, with a client certificate: %d %v; want 200", code, err)
	}

	for _, o := range []server.Options{{AdminTLSCert: certFile}, {AdminTLSCA: caFile}} {
		o.Fill()
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated; want -admin-tls-cert and -admin-tls-key together, and a client CA only with them", o)
		}
	}
}
