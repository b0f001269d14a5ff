package trust

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// Store holds a member's reloadable TLS material: the certificate and CA
// of the PEM-file mode (Files) and the revocation list (RevokedFile).
// Connections read it through atomic pointers; only one goroutine, the
// member's watcher, reloads it.
type Store struct {
	certFile, keyFile, caFile string // all set, or none (files)
	revokedFile               string
	files                     bool

	cert    atomic.Pointer[tls.Certificate]
	roots   atomic.Pointer[x509.CertPool]
	revoked atomic.Pointer[Revocations]

	// Contents last read (loaded, or refused), so that each change is
	// parsed, and logged if bad, once. Watcher goroutine only.
	filesSum, revokedSum [sha256.Size]byte
	// failures counts replacements refused because they did not parse.
	failures atomic.Int64
}

// ErrFiles reports certificate, key and CA files not given together.
var ErrFiles = errors.New("TLSCertFile, TLSKeyFile and TLSCAFile go together")

// NewStore reads the PEM files of a member's certificate, its key and the
// cluster CA (all three, or none) and the revocation list (or ""), or
// returns nil when it names none. It fails with ErrFiles for some but not
// all of the three, and with the reason for a file that cannot be read or
// parsed.
func NewStore(certFile, keyFile, caFile, revokedFile string) (*Store, error) {
	files := certFile != "" || keyFile != "" || caFile != ""
	if !files && revokedFile == "" {
		return nil, nil
	}
	if files && (certFile == "" || keyFile == "" || caFile == "") {
		return nil, ErrFiles
	}
	s := &Store{certFile: certFile, keyFile: keyFile, caFile: caFile, revokedFile: revokedFile, files: files}
	if _, err := s.ReloadFiles(); err != nil {
		return nil, err
	}
	if _, err := s.ReloadRevoked(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files reports whether the store holds certificate files.
func (s *Store) Files() bool { return s.files }

// RevokedFile returns the revocation list's file, or "".
func (s *Store) RevokedFile() string { return s.revokedFile }

// Cert returns the certificate in use (nil without Files).
func (s *Store) Cert() *tls.Certificate { return s.cert.Load() }

// Roots returns the cluster CA in use (nil without Files).
func (s *Store) Roots() *x509.CertPool { return s.roots.Load() }

// ReloadFiles reads the certificate, key and CA files and, if their
// contents changed since the last read, installs them. changed reports an
// installation; err a change that did not parse (the old ones stay).
func (s *Store) ReloadFiles() (changed bool, err error) {
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

// ReloadRevoked reads the revocation list and, if it changed, installs it.
func (s *Store) ReloadRevoked() (changed bool, err error) {
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
	r, err := ParseRevocations(raw)
	if err != nil {
		return false, fmt.Errorf("%s: %w", s.revokedFile, err)
	}
	s.revoked.Store(r)
	return true, nil
}

// Refused counts a replacement that was not installed (see Failures).
func (s *Store) Refused() { s.failures.Add(1) }

// Failures returns how many replacements were refused so far.
func (s *Store) Failures() int64 { return s.failures.Load() }

// IsRevoked reports whether c is on the revocation list; a nil Store
// revokes nothing.
func (s *Store) IsRevoked(c *x509.Certificate) bool {
	if s == nil {
		return false
	}
	r := s.revoked.Load()
	return r != nil && r.Has(c)
}

// GetCertificate serves the certificate in use (tls.Config's).
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// GetClientCertificate serves the certificate in use (tls.Config's).
func (s *Store) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}
