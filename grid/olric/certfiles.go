package olric

import (
	"fmt"
	"time"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
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
var errRevoked = trust.ErrRevoked

// newCertStore reads the files named in c (internal/trust's Store), or
// returns nil when c names none. An unreadable or invalid file, or files
// given in part, are an ErrSecurity.
func newCertStore(c *Config) (*trust.Store, error) {
	s, err := trust.NewStore(c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile, c.RevokedFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSecurity, err)
	}
	return s, nil
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
func (t *guard) watchCerts() {
	m := t.m
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.certPoll())
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tick.C:
		}
		t.reloadCerts()
	}
}

// reloadCerts re-reads the files once: a change that does not parse is
// logged and counted, and what is in use stays; a new revocation list
// expels the members it revokes.
func (t *guard) reloadCerts() {
	m, s := t.m, t.creds.store
	if _, err := s.ReloadFiles(); err != nil {
		s.Refused()
		m.logf("certificate files not reloaded, the previous ones stay in use: %v", err)
	}
	changed, err := s.ReloadRevoked()
	if err != nil {
		s.Refused()
		m.logf("revocation list not reloaded, the previous one stays in use: %v", err)
	}
	if changed {
		m.trust.expelRevoked()
	}
}
