package olric

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a certificate authority made up for one test: ECDSA P-256,
// nothing committed to the repository.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf issues a member certificate, usable as server and as client, that
// names the loopback addresses (every test member binds 127.0.0.1).
func (ca *testCA) leaf(t testing.TB) tls.Certificate {
	return ca.leafFor(t, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
}

// leafFor issues a member certificate naming ips.
func (ca *testCA) leafFor(t testing.TB, ips ...net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "member"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
	}, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsConfig is a member's owner-channel configuration under this CA.
func (ca *testCA) tlsConfig(t testing.TB) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.leaf(t)}, RootCAs: ca.pool}
}

// files writes a member certificate, its key and the CA as PEM files and
// returns their paths.
func (ca *testCA) files(t testing.TB) (cert, key, caFile string) {
	t.Helper()
	dir := t.TempDir()
	// Also the sources attackerDialer uses.
	c := ca.leafFor(t, net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3), net.IPv4(127, 0, 0, 4), net.IPv4(127, 0, 0, 5), net.IPv6loopback)
	kb, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("member.pem", "CERTIFICATE", c.Certificate[0]),
		write("member.key", "EC PRIVATE KEY", kb),
		write("ca.pem", "CERTIFICATE", ca.cert.Raw)
}

// randomKey returns n random bytes.
func randomKey(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// cluster secrets: one CA, one gossip key, one password.
type secrets struct {
	ca       *testCA
	gossip   []byte
	password string
}

func newSecrets(t testing.TB) *secrets {
	return &secrets{ca: newTestCA(t, "cluster CA"), gossip: randomKey(t, 32), password: rand.Text()}
}

// secure returns a config tweak that secures a member with s (a fresh
// certificate per member).
func (s *secrets) secure(t testing.TB) func(*Config) {
	return func(c *Config) {
		c.TLS = s.ca.tlsConfig(t)
		c.GossipKeys = [][]byte{s.gossip}
		c.Password = s.password
	}
}
