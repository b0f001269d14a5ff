package olric

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// The production path of the owner channel's TLS is the operator's PKI:
// PEM files of each member's certificate, its key and the cluster CA
// (Config.TLSCertFile, TLSKeyFile, TLSCAFile), as cert-manager writes them
// in Kubernetes (the files replaced at once by a symbolic link swap), plus
// a revocation list (Config.RevokedFile). A member re-reads them while it
// runs (certWatch), like Consul's and etcd's reloaded certificate files and
// CockroachDB's certificate directory: a renewed certificate or CA is used
// for the next connection, without a restart; a listed certificate is
// refused on every connection from then on, and its member expelled
// (expel.go). A replacement that does not parse is logged and counted, and
// the files in use stay in use.

// errRevoked refuses a certificate listed in Config.RevokedFile.
var errRevoked = errors.New("bucketgrid/olric: the certificate is revoked (RevokedFile)")

// certStore holds the member's reloadable TLS material: the certificate
// and CA of the PEM-file mode (files set) and the revocation list
// (revokedFile set). Connections read it through atomic pointers; only
// the member's watcher goroutine reloads it.
type certStore struct {
	certFile, keyFile, caFile string // all set, or none (files)
	revokedFile               string
	files                     bool

	cert    atomic.Pointer[tls.Certificate]
	roots   atomic.Pointer[x509.CertPool]
	revoked atomic.Pointer[revocations]

	// Contents last read (loaded, or refused), so that each change is
	// parsed, and logged if bad, once. Watcher goroutine only.
	filesSum, revokedSum [sha256.Size]byte
	// failures counts replacements refused because they did not parse.
	failures atomic.Int64
}

// newCertStore reads the files named in c, or returns nil when c names
// none. An unreadable or invalid file is an ErrSecurity.
func newCertStore(c *Config) (*certStore, error) {
	files := c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != ""
	if !files && c.RevokedFile == "" {
		return nil, nil
	}
	if files && (c.TLSCertFile == "" || c.TLSKeyFile == "" || c.TLSCAFile == "") {
		return nil, fmt.Errorf("%w: TLSCertFile, TLSKeyFile and TLSCAFile go together", ErrSecurity)
	}
	s := &certStore{certFile: c.TLSCertFile, keyFile: c.TLSKeyFile, caFile: c.TLSCAFile, revokedFile: c.RevokedFile, files: files}
	if _, err := s.reloadFiles(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSecurity, err)
	}
	if _, err := s.reloadRevoked(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSecurity, err)
	}
	return s, nil
}

// reloadFiles reads the certificate, key and CA files and, if their
// contents changed since the last read, installs them. changed reports an
// installation; err a change that did not parse (the old ones stay).
func (s *certStore) reloadFiles() (changed bool, err error) {
	if !s.files {
		return false, nil
	}
	var raw [3][]byte
	for i, name := range []string{s.certFile, s.keyFile, s.caFile} {
		if raw[i], err = os.ReadFile(name); err != nil {
			return false, err
		}
	}
	sum := sha256.Sum256(bytes.Join(raw[:], []byte{0}))
	if sum == s.filesSum {
		return false, nil
	}
	s.filesSum = sum
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return false, fmt.Errorf("%s, %s: %w", s.certFile, s.keyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return false, fmt.Errorf("no certificate in %s", s.caFile)
	}
	s.cert.Store(&cert)
	s.roots.Store(pool)
	return true, nil
}

// reloadRevoked reads the revocation list and, if it changed, installs it.
func (s *certStore) reloadRevoked() (changed bool, err error) {
	if s.revokedFile == "" {
		return false, nil
	}
	raw, err := os.ReadFile(s.revokedFile)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(raw)
	if sum == s.revokedSum && s.revoked.Load() != nil {
		return false, nil
	}
	s.revokedSum = sum
	r, err := parseRevocations(raw)
	if err != nil {
		return false, fmt.Errorf("%s: %w", s.revokedFile, err)
	}
	s.revoked.Store(r)
	return true, nil
}

// isRevoked reports whether c is on the revocation list.
func (s *certStore) isRevoked(c *x509.Certificate) bool {
	if s == nil {
		return false
	}
	r := s.revoked.Load()
	return r != nil && r.has(c)
}

func (s *certStore) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

func (s *certStore) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// revocations are the certificates of a revocation list: by serial number
// (as big-endian hex digits) and by SHA-256 fingerprint of the DER.
type revocations struct {
	serials map[string]bool
	prints  map[[sha256.Size]byte]bool
}

func (r *revocations) has(c *x509.Certificate) bool {
	return r.prints[sha256.Sum256(c.Raw)] || r.serials[serialKey(c.SerialNumber)]
}

func serialKey(n *big.Int) string { return n.Text(16) }

// parseRevocations parses a revocation list: one certificate a line, as
// its SHA-256 fingerprint (64 hex digits, as `openssl x509 -fingerprint
// -sha256` prints it, colons allowed) or its serial number (at most 40 hex
// digits, as `openssl x509 -serial` prints it, "serial=" allowed); blank
// lines and text after '#' are ignored. Any other line is an error naming
// it.
func parseRevocations(raw []byte) (*revocations, error) {
	r := &revocations{serials: map[string]bool{}, prints: map[[sha256.Size]byte]bool{}}
	for i, line := range strings.Split(string(raw), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		v := strings.ToLower(line)
		if k := strings.LastIndexByte(v, '='); k >= 0 { // serial=…, sha256 Fingerprint=…
			v = v[k+1:]
		}
		v = strings.ReplaceAll(v, ":", "")
		b, err := hex.DecodeString(v)
		if len(v)%2 == 1 {
			b, err = hex.DecodeString("0" + v)
		}
		switch {
		case err != nil || len(b) == 0:
			return nil, fmt.Errorf("line %d: %q is neither a serial number nor a SHA-256 fingerprint in hex", i+1, line)
		case len(b) == sha256.Size:
			r.prints[[sha256.Size]byte(b)] = true
		case len(b) <= 20:
			r.serials[serialKey(new(big.Int).SetBytes(b))] = true
		default:
			return nil, fmt.Errorf("line %d: %d bytes: a serial number has at most 20, a SHA-256 fingerprint 32", i+1, len(b))
		}
	}
	return r, nil
}

// certPoll is how often a member re-reads its certificate files and
// revocation list: four times a heal interval (a second when healing is
// off), so that a revocation is acted on well within one.
func (c *Config) certPoll() time.Duration {
	if c.HealInterval <= 0 {
		return time.Second / 4
	}
	return max(c.HealInterval/4, 10*time.Millisecond)
}

// watchCerts re-reads the member's certificate files and revocation list
// every certPoll until the member shuts down.
func (m *Member) watchCerts() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.certPoll())
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.reloadCerts()
	}
}

// reloadCerts re-reads the files once: a change that does not parse is
// logged and counted, and what is in use stays; a new revocation list
// expels the members it revokes.
func (m *Member) reloadCerts() {
	s := m.creds.store
	if _, err := s.reloadFiles(); err != nil {
		s.failures.Add(1)
		m.logf("certificate files not reloaded, the previous ones stay in use: %v", err)
	}
	changed, err := s.reloadRevoked()
	if err != nil {
		s.failures.Add(1)
		m.logf("revocation list not reloaded, the previous one stays in use: %v", err)
	}
	if changed {
		m.expelRevoked()
	}
}
