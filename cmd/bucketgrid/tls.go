package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// serverCredentials returns the gRPC TLS credentials of t, nil without
// TLS. The certificate and key are re-read when their files change (checked
// at most once a second), so a rotated certificate is served without a
// restart.
func serverCredentials(t tlsFlags) (credentials.TransportCredentials, error) {
	if t.Cert == "" {
		return nil, nil
	}
	r := &certReloader{cert: t.Cert, key: t.Key}
	if _, err := r.get(nil); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate", t.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := t.ClientSAN; san != "" {
			cfg.VerifyPeerCertificate = requireSAN(san)
		}
	}
	return credentials.NewTLS(cfg), nil
}

// requireSAN refuses a verified client certificate that does not hold
// san, matched as envoyproxy/ratelimit matches GRPC_CLIENT_TLS_SAN: as
// x509 matches a host name (a DNS name, wildcards included, or an IP
// address).
func requireSAN(san string) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return errors.New("no verified client certificate")
		}
		if err := chains[0][0].VerifyHostname(san); err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		return nil
	}
}

type certReloader struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	mtime   time.Time
	checked time.Time
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.current != nil && now.Sub(r.checked) < time.Second {
		return r.current, nil
	}
	r.checked = now
	mt := latestMtime(r.cert, r.key)
	if r.current != nil && !mt.After(r.mtime) {
		return r.current, nil
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.current != nil {
			return r.current, nil // keep serving the previous pair while the new one is half written
		}
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	r.current, r.mtime = &c, mt
	return r.current, nil
}

func latestMtime(files ...string) time.Time {
	var t time.Time
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t
}
