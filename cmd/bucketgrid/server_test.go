package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

const serverConfig = `
domain: srv
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
`

func memoryInstance(t *testing.T, extra ...string) (*instance, string) {
	t.Helper()
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	args := append([]string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-backend", "memory", "-reload-interval", "10ms"}, extra...)
	return startInstance(t, args...), dir
}

func TestHealthAndReflection(t *testing.T) {
	in, _ := memoryInstance(t)
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range []string{"", rlspb.RateLimitService_ServiceDesc.ServiceName} {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, r, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), rlspb.RateLimitService_ServiceDesc.ServiceName) {
		t.Fatalf("reflection lists %v", names)
	}
	hr, err := http.Get("http://" + in.httpAddr + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != 200 || string(body) != "OK" {
		t.Fatalf("/healthcheck: %d %q", hr.StatusCode, body)
	}
}

// TestReload: a changed file is served within a few polls; a bad one keeps
// the configuration in force, and says so in the metrics.
func TestReload(t *testing.T) {
	in, dir := memoryInstance(t)
	c := client(t, in.grpcAddr)
	allowed := func(value string) int {
		n := 0
		for range 3 {
			r, err := call(c, req("srv", "k", value))
			if err != nil {
				t.Fatal(err)
			}
			if r.OverallCode == rlspb.RateLimitResponse_OK {
				n++
			}
		}
		return n
	}
	if n := allowed("a"); n != 1 {
		t.Fatalf("%d admitted, want 1", n)
	}
	replace := func(data string) {
		tmp := filepath.Join(dir, "srv.yaml.tmp~")
		os.WriteFile(tmp, []byte(data), 0o644)
		if err := os.Rename(tmp, filepath.Join(dir, "srv.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	replace(strings.Replace(serverConfig, "requests_per_unit: 1", "requests_per_unit: 2", 1))
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; allowed("b"+string(rune('a'+i%26))+time.Now().String()) != 2; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the new limit was not served within 30s")
		}
	}
	replace(strings.Replace(serverConfig, "unit: hour", "unit: fortnight", 1))
	for !strings.Contains(metricsText(t, in), `bucketgrid_rls_config_loads_total{result="error"} 1`) {
		if time.Now().After(deadline) {
			t.Fatal("the bad file was not reported within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := allowed("c"); n != 2 {
		t.Fatalf("after a bad reload: %d admitted, want the previous configuration's 2", n)
	}
}

func metricsText(t *testing.T, in *instance) string {
	t.Helper()
	r, err := http.Get("http://" + in.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-config is required"},
		{[]string{"-config", "x", "-algorithm", "leaky"}, `-algorithm "leaky"`},
		{[]string{"-config", "x", "-headers", "all"}, `-headers "all"`},
		{[]string{"-config", "x", "-grid-bind", "nowhere"}, `-grid-bind "nowhere"`},
		{[]string{"-config", "x", "-grid-bind", "127.0.0.1:65534"}, "-grid-bind"},
		{[]string{"-config", "x", "-grid-env", "wan"}, `-grid-env "wan"`},
		{[]string{"-config", "x", "-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-config", "x", "-tls-client-ca", "ca.pem"}, "-tls-client-ca needs"},
		{[]string{"-config", "x", "-near-limit-ratio", "1.5"}, "-near-limit-ratio"},
		{[]string{"-config", "x", "extra"}, "unexpected arguments"},
		{[]string{"-config", "x", "-grid-tls-cert", "c.pem"}, "-grid-tls-cert, -grid-tls-key and -grid-tls-ca go together"},
		{[]string{"-config", "x", "-grid-tls-cert", "c", "-grid-tls-key", "k", "-grid-tls-ca", "a", "-grid-secret-file", "s"}, "alternatives"},
		{[]string{"-config", "x", "-degrade-timeout", "1s"}, "-degrade-timeout positive and below -timeout"},
		{[]string{"-config", "x", "-degrade-instances", "-1"}, "-degrade-instances must not be negative"},
		{[]string{"-config", "x", "-backend", "redis://h:1", "-degrade-count"}, "-degrade-count needs -degrade"},
		{[]string{"-config", "x", "-degrade", "-degrade-count"}, "not -backend grid (the grid counts its members)"},
		{[]string{"-config", "x", "-backend", "memory", "-degrade", "-degrade-count"}, "not -backend memory"},
		{[]string{"-config", "x", "-backend", "redis://h:1", "-degrade", "-degrade-count", "-degrade-count-ttl", "1s"}, "-degrade-count-ttl 1s: want at least 2s"},
		{[]string{"-config", "x", "-grid-leases=off", "-grid-lease-lifetime", "50ms"}, "needs -grid-leases other than off"},
		{[]string{"-config", "x", "-grid-leases=greedy"}, `-grid-leases "greedy": want exact, all or off`},
		{[]string{"-config", "x", "-grid-leases", "-grid-lease-lifetime", "-1s"}, "-grid-lease-lifetime must not be negative"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		_, err := parseFlags(fs, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c, err := parseFlags(fs, []string{"-config", "a,b", "-config", "c", "-headers", "ietf,x-ratelimit", "-algorithm", "token_bucket"})
	if err != nil || len(c.ConfigPaths) != 3 || c.Headers != 3 || c.Rules.Algorithm.String() != "token_bucket" {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestGracefulShutdown: on shutdown the instance stops accepting, its
// health fails, and run returns without error.
func TestGracefulShutdown(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"srv.yaml": serverConfig})
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg, err := parseFlags(fs, []string{"-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-backend", "memory", "-drain-grace", "0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, pw, io.Discard); pw.Close() }()
	line := make([]byte, 256)
	n, _ := pr.Read(line)
	go io.Copy(io.Discard, pr)
	addr := field(string(line[:n]), "grpc=")
	if _, err := call(client(t, addr), req("srv", "k", "x")); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of the shutdown")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the gRPC port still accepts after shutdown")
	}
}

// TestTLS: with a certificate the gRPC API speaks TLS; with a client CA it
// refuses clients without a certificate from that CA.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	newLeaf(t, ca, caKey, dir, "server", x509.ExtKeyUsageServerAuth)
	cliCert := newLeaf(t, ca, caKey, dir, "client", x509.ExtKeyUsageClientAuth)
	in, _ := memoryInstance(t, "-tls-cert", filepath.Join(dir, "server.pem"), "-tls-key", filepath.Join(dir, "server-key.pem"),
		"-tls-client-ca", filepath.Join(dir, "ca.pem"))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	dial := func(certs []tls.Certificate) error {
		conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: pool, ServerName: "127.0.0.1", Certificates: certs})))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = call(rlspb.NewRateLimitServiceClient(conn), req("srv", "k", "tls"))
		return err
	}
	if err := dial([]tls.Certificate{cliCert}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := dial(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	conn, _ := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecureCreds()))
	defer conn.Close()
	if _, err := call(rlspb.NewRateLimitServiceClient(conn), req("srv", "k", "plain")); err == nil {
		t.Fatal("a plaintext client was served")
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dir, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestJSONBodyTooLarge: a /json body beyond -http-max-body is answered
// 413, as the flag says, not 400 (a body that is wrong).
func TestJSONBodyTooLarge(t *testing.T) {
	in, _ := memoryInstance(t, "-http-max-body", "1000")
	body := `{"domain":"srv","descriptors":[{"entries":[{"key":"k","value":"` + strings.Repeat("x", 2000) + `"}]}]}`
	r, err := http.Post("http://"+in.httpAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a %d-byte body over -http-max-body 1000: %d, want 413", len(body), r.StatusCode)
	}
}
