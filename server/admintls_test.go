package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hongbao-io/hongbao/server"
)

// testCA signs certificates for the tests of TLS.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a certificate of the CA's for 127.0.0.1, as a server's or
// a client's, and its PEM files.
func (ca *testCA) issue(t *testing.T, dir, name string, usage x509.ExtKeyUsage) (tls.Certificate, string, string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// The admin API over TLS (-admin-tls-cert, -admin-tls-key): answered over
// TLS to a client that trusts its CA, refused in plain HTTP; with
// -admin-tls-client-ca, only to a client whose certificate chains to it.
func TestAdminTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t)
	_, certFile, keyFile := ca.issue(t, dir, "server", x509.ExtKeyUsageServerAuth)
	clientCert, _, _ := ca.issue(t, dir, "client", x509.ExtKeyUsageClientAuth)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)

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
	if code, err := get("https://"+addr+"/healthz", &tls.Config{RootCAs: ca.pool}); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz over TLS: %d %v; want 200", code, err)
	}
	if code, err := get("http://"+addr+"/healthz", nil); err == nil && code == http.StatusOK {
		t.Fatal("GET /healthz in plain HTTP answered 200; want it refused")
	}
	if _, err := get("https://"+addr+"/healthz", &tls.Config{}); err == nil {
		t.Fatal("a client that does not trust the server's CA got an answer")
	}

	mutual := start(caFile)
	if _, err := get("https://"+mutual+"/healthz", &tls.Config{RootCAs: ca.pool}); err == nil {
		t.Fatal("-admin-tls-client-ca: answered a client without a certificate")
	}
	if code, err := get("https://"+mutual+"/healthz", &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{clientCert}}); err != nil || code != http.StatusOK {
		t.Fatalf("-admin-tls-client-ca, with a client certificate: %d %v; want 200", code, err)
	}

	for _, o := range []server.Options{{AdminTLSCert: certFile}, {AdminTLSCA: caFile}} {
		o.Fill()
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated; want -admin-tls-cert and -admin-tls-key together, and a client CA only with them", o)
		}
	}
}
