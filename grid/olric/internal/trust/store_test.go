package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testPKI is a CA and the PEM of a leaf it issued.
type testPKI struct {
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPEM   []byte
	serial  int64
	leaf    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
	p.issue(t)
	return p
}

// issue makes a new leaf the current one.
func (p *testPKI) issue(t *testing.T) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: "member"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.leaf, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p.certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestParseRevocations reads a revocation list as operators write it and
// refuses lines that are neither a serial number nor a fingerprint.
func TestParseRevocations(t *testing.T) {
	p := newTestPKI(t)
	a := p.leaf
	p.issue(t)
	b := p.leaf
	p.issue(t)
	c := p.leaf
	fp := sha256.Sum256(b.Raw)
	var colons []string
	for _, x := range fp {
		colons = append(colons, fmt.Sprintf("%02X", x))
	}
	list := fmt.Sprintf("# revoked 2026-12-07\n\nserial=%X  # host a\nsha256 Fingerprint=%s\n", a.SerialNumber, strings.Join(colons, ":"))
	r, err := ParseRevocations([]byte(list))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Has(a) || !r.Has(b) || r.Has(c) {
		t.Fatalf("Has: %v %v %v, want true true false", r.Has(a), r.Has(b), r.Has(c))
	}
	if r, err := ParseRevocations([]byte(hex.EncodeToString(fp[:]) + "\n")); err != nil || !r.Has(b) {
		t.Fatalf("a bare fingerprint: %v", err)
	}
	for _, bad := range []string{"host-a\n", "serial=12345678901234567890123456789012345678901234\n", "zz\n"} {
		if _, err := ParseRevocations([]byte("# ok\n" + bad)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v, want an error naming line 2", bad, err)
		}
	}
}

// TestStoreReload is the operator's files changing under a running member:
// a renewed certificate is installed, a replacement that does not parse is
// refused and the one in use stays, and a revocation list revokes from
// the reload on. Files given in part are refused at once.
func TestStoreReload(t *testing.T) {
	if _, err := NewStore("cert.pem", "", "ca.pem", ""); !errors.Is(err, ErrFiles) {
		t.Fatalf("some files: %v, want ErrFiles", err)
	}
	if s, err := NewStore("", "", "", ""); s != nil || err != nil {
		t.Fatalf("no files: %v, %v, want nil, nil", s, err)
	}
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	write := func(n string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path(n), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := newTestPKI(t)
	write("cert.pem", p.certPEM)
	write("key.pem", p.keyPEM)
	write("ca.pem", p.caPEM)
	write("revoked", []byte("# none\n"))
	s, err := NewStore(path("cert.pem"), path("key.pem"), path("ca.pem"), path("revoked"))
	if err != nil {
		t.Fatal(err)
	}
	first := p.leaf
	if s.IsRevoked(first) {
		t.Fatal("revoked by an empty list")
	}
	if changed, err := s.ReloadFiles(); changed || err != nil {
		t.Fatalf("unchanged files: %v, %v", changed, err)
	}
	p.issue(t)
	write("cert.pem", p.certPEM)
	write("key.pem", p.keyPEM)
	if changed, err := s.ReloadFiles(); !changed || err != nil {
		t.Fatalf("a renewed certificate: %v, %v, want installed", changed, err)
	}
	if got, _ := s.GetCertificate(nil); string(got.Certificate[0]) != string(p.leaf.Raw) {
		t.Fatal("the renewed certificate is not served")
	}
	write("cert.pem", []byte("half a file"))
	if changed, err := s.ReloadFiles(); changed || err == nil {
		t.Fatalf("a bad certificate: %v, %v, want refused", changed, err)
	}
	if got, _ := s.GetClientCertificate(nil); string(got.Certificate[0]) != string(p.leaf.Raw) {
		t.Fatal("a bad replacement displaced the certificate in use")
	}
	write("revoked", []byte(fmt.Sprintf("serial=%X\n", first.SerialNumber)))
	if changed, err := s.ReloadRevoked(); !changed || err != nil || !s.IsRevoked(first) || s.IsRevoked(p.leaf) {
		t.Fatalf("a new list: %v, %v; first revoked %v, current %v", changed, err, s.IsRevoked(first), s.IsRevoked(p.leaf))
	}
	write("revoked", []byte("not a serial\n"))
	if changed, err := s.ReloadRevoked(); changed || err == nil || !s.IsRevoked(first) {
		t.Fatalf("a bad list: %v, %v; want refused and the old list kept", changed, err)
	}
	var none *Store
	if none.IsRevoked(first) {
		t.Fatal("a nil Store revokes")
	}
}
