package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"io"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TestDefaultsAddNoHeaders: run with its defaults, the service adds no
// response headers, as envoyproxy/ratelimit adds them only with
// LIMIT_RESPONSE_HEADERS_ENABLED; not on a refusal either.
func TestDefaultsAddNoHeaders(t *testing.T) {
	in, _ := memoryInstance(t)
	c := client(t, in.grpcAddr)
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		r, err := call(c, req("srv", "k", "defaults"))
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != want || len(r.ResponseHeadersToAdd) != 0 {
			t.Fatalf("request %d: %v with headers %v, want %v and none", i, r.OverallCode, r.ResponseHeadersToAdd, want)
		}
	}
}

// leafWithSAN is a client certificate of ca naming dns in its SANs.
func leafWithSAN(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dns ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSNames: dns}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSClientSAN is envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN: a client
// certificate of the CA without the SAN is refused, one with it served.
func TestTLSClientSAN(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	newLeaf(t, ca, caKey, dir, "server", x509.ExtKeyUsageServerAuth)
	in, _ := memoryInstance(t, "-tls-cert", filepath.Join(dir, "server.pem"), "-tls-key", filepath.Join(dir, "server-key.pem"),
		"-tls-client-ca", filepath.Join(dir, "ca.pem"), "-tls-client-san", "envoy.example.com")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	dial := func(cert tls.Certificate) error {
		conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = call(rlspb.NewRateLimitServiceClient(conn), req("srv", "k", "san"))
		return err
	}
	if err := dial(leafWithSAN(t, ca, caKey, "other.example.com")); err == nil {
		t.Fatal("a client certificate without the SAN was served")
	}
	if err := dial(leafWithSAN(t, ca, caKey, "other.example.com", "envoy.example.com")); err != nil {
		t.Fatalf("a client certificate with the SAN: %v", err)
	}
}

func TestDropinFlags(t *testing.T) {
	parse := func(args ...string) (settings, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return parseFlagsEnv(fs, append([]string{"-config", "x"}, args...), noEnv)
	}
	c, err := parse()
	if err != nil || c.Headers != 0 || c.RetryAfter || c.StopCountingWhenOverLimit || c.TLS.ClientSAN != "" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-client-san", "a"}, "-tls-client-san needs -tls-client-ca"},
		{[]string{"-draft-header-names", "a,b"}, "-draft-header-names"},
		{[]string{"-draft-header-names", "a,b c,d"}, "-draft-header-names"},
		{[]string{"-log-format", "xml"}, "-log-format"},
	} {
		if _, err := parse(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	c, err = parse("-headers", "draft,retry-after", "-draft-header-names", "X-L,X-R,X-S")
	if err != nil || !c.RetryAfter || c.HeaderNames["ratelimit-limit"] != "x-l" || c.HeaderNames["ratelimit-reset"] != "x-s" {
		t.Fatalf("%+v %v", c, err)
	}
}

// noEnv is an environment without envoyproxy/ratelimit's settings.
func noEnv(string) (string, bool) { return "", false }
