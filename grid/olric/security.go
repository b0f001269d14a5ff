package olric

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"

	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/bucketgrid/bucketgrid/grid/olric/internal/trust"
)

// credentials are a member's security settings, ready to use.
type credentials struct {
	// server and client configure the owner channel's two ends; nil means
	// plain TCP.
	server, client *tls.Config
	// keyring encrypts gossip; nil means clear text.
	keyring *memberlist.Keyring
	// password is Olric's AUTH password; empty means none.
	password string
	// store is the reloadable certificate files and revocation list;
	// nil when neither is configured.
	store *trust.Store
}

// credentials checks c's security settings and builds them. It refuses a
// member reachable from the network without all of them unless c.Insecure.
func (c *Config) credentials() (credentials, error) {
	var cr credentials
	var err error
	if cr.store, err = newCertStore(c); err != nil {
		return cr, err
	}
	base, err := c.channelTLS(cr.store)
	if err != nil {
		return cr, err
	}
	if base != nil {
		if cr.server, cr.client, err = mutualTLS(base, cr.store); err != nil {
			return cr, err
		}
	} else if c.RevokedFile != "" {
		return cr, fmt.Errorf("%w: RevokedFile needs channel TLS (TLS, TLSCertFile or ChannelSecret)", ErrSecurity)
	}
	if len(c.GossipKeys) > 0 {
		for i, k := range c.GossipKeys {
			if err := memberlist.ValidateKey(k); err != nil {
				return cr, fmt.Errorf("%w: GossipKeys[%d]: %v", ErrSecurity, i, err)
			}
			if err := checkRandomKey(fmt.Sprintf("GossipKeys[%d]", i), k, 32); err != nil {
				return cr, err
			}
		}
		if cr.keyring, err = memberlist.NewKeyring(c.GossipKeys[1:], c.GossipKeys[0]); err != nil {
			return cr, fmt.Errorf("%w: GossipKeys: %v", ErrSecurity, err)
		}
	}
	if c.Password != "" {
		if err := checkPassword(c.Password); err != nil {
			return cr, err
		}
	}
	cr.password = c.Password
	if c.Insecure || c.loopbackOnly() {
		return cr, nil
	}
	var missing []string
	if cr.server == nil {
		missing = append(missing, "TLS")
	}
	if cr.keyring == nil {
		missing = append(missing, "GossipKeys")
	}
	if cr.password == "" {
		missing = append(missing, "Password")
	}
	if len(missing) > 0 {
		return cr, fmt.Errorf("%w (missing: %s)", ErrInsecure, strings.Join(missing, ", "))
	}
	return cr, nil
}

// channelTLS returns the TLS configuration of the owner channel from
// whichever of TLS, the TLS files (read into store) or ChannelSecret is
// set, or nil.
func (c *Config) channelTLS(store *trust.Store) (*tls.Config, error) {
	files := c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSCAFile != ""
	n := 0
	for _, set := range []bool{c.TLS != nil, files, len(c.ChannelSecret) > 0} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, fmt.Errorf("%w: set one of TLS, TLSCertFile/TLSKeyFile/TLSCAFile and ChannelSecret", ErrSecurity)
	case c.TLS != nil:
		return c.TLS.Clone(), nil
	case files:
		// Read by newCertStore; served from it (see mutualTLS).
		return &tls.Config{Certificates: []tls.Certificate{*store.Cert()}, RootCAs: store.Roots()}, nil
	case len(c.ChannelSecret) > 0:
		return secretTLS(c.ChannelSecret, c.BindAddr)
	}
	return nil, nil
}

// mutualTLS derives the two ends of the owner channel from base: TLS 1.3
// only, client certificates required and verified against the cluster CA.
// client is a template: dialTLS completes it for the host dialled, whose
// certificate must name it. With store, certificates come from its files
// and the CA from its file (when it has them) as they are when each
// connection starts, and a certificate on its revocation list is refused
// at both ends.
func mutualTLS(base *tls.Config, store *trust.Store) (server, client *tls.Config, err error) {
	if len(base.Certificates) == 0 && (base.GetCertificate == nil || base.GetClientCertificate == nil) {
		return nil, nil, fmt.Errorf("%w: TLS has no certificate", ErrSecurity)
	}
	if base.RootCAs == nil {
		return nil, nil, fmt.Errorf("%w: TLS has no RootCAs (the cluster CA)", ErrSecurity)
	}
	server = base.Clone()
	server.MinVersion = tls.VersionTLS13
	server.ClientAuth = tls.RequireAndVerifyClientCert
	if server.ClientCAs == nil {
		server.ClientCAs = base.RootCAs
	}
	client = base.Clone()
	client.MinVersion = tls.VersionTLS13
	if store == nil {
		return server, client, nil
	}
	if store.Files() {
		server.Certificates, server.GetCertificate = nil, store.GetCertificate
		client.Certificates, client.GetClientCertificate = nil, store.GetClientCertificate
		client.RootCAs = nil // see credentials.dialTLS
	}
	// The client's chain is verified here, against the CA of the moment.
	cas, next := server.ClientCAs, server.VerifyConnection
	server.ClientCAs, server.ClientAuth = nil, tls.RequireAnyClientCert
	server.VerifyConnection = func(cs tls.ConnectionState) error {
		pool := cas
		if store.Files() {
			pool = store.Roots()
		}
		if err := verifyChain(cs.PeerCertificates, pool, x509.ExtKeyUsageClientAuth); err != nil {
			return err
		}
		if store.IsRevoked(cs.PeerCertificates[0]) {
			return errRevoked
		}
		if next != nil {
			return next(cs)
		}
		return nil
	}
	cnext := client.VerifyConnection
	client.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) > 0 && store.IsRevoked(cs.PeerCertificates[0]) {
			return errRevoked
		}
		if cnext != nil {
			return cnext(cs)
		}
		return nil
	}
	return server, client, nil
}

// dialTLS returns the client configuration for dialling the member on
// host (see dialTLS), with the CA of the moment.
func (cr *credentials) dialTLS(host string) *tls.Config {
	if cr.store == nil || !cr.store.Files() {
		return dialTLS(cr.client, host)
	}
	t := cr.client.Clone()
	t.RootCAs = cr.store.Roots()
	return dialTLS(t, host)
}

// dialTLS returns the client configuration for dialling the member on
// host: the owner must present a certificate of the cluster CA (for server
// authentication) that names host, as an IP address or DNS name. It
// replaces the standard verification (InsecureSkipVerify), which would
// compare the name with the TLS server name, empty for an IP address.
func dialTLS(template *tls.Config, host string) *tls.Config {
	c := template.Clone()
	c.InsecureSkipVerify = true // replaced by VerifyConnection
	roots, next := template.RootCAs, template.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verifyMember(cs.PeerCertificates, roots, host, x509.ExtKeyUsageServerAuth); err != nil {
			return err
		}
		if next != nil {
			return next(cs)
		}
		return nil
	}
	return c
}

// errUnnamed reports a member certificate that does not name the member.
var errUnnamed = errors.New("bucketgrid/olric: the certificate does not name the member")

// verifyMember checks that chain (leaf first) is a certificate of the
// cluster CA for usage that names host.
func verifyMember(chain []*x509.Certificate, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) error {
	if err := verifyChain(chain, roots, usage); err != nil {
		return err
	}
	if err := chain[0].VerifyHostname(host); err != nil {
		return fmt.Errorf("%w %s: %v", errUnnamed, host, err)
	}
	return nil
}

// verifyChain checks that chain (leaf first) is a certificate of the
// cluster CA for usage.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errors.New("bucketgrid/olric: member presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	return err
}

// verifySource checks that the certificate tc's client proved names the
// host raw comes from: as an IP address, or as a DNS name that resolves to
// it. A certificate of the cluster CA issued for another host is refused
// before any byte of the owner channel, the tunnel or the identity
// question is read. Members dial from their BindAddr (see Config.dial).
func (t *guard) verifySource(raw net.Conn, tc *tls.Conn) error {
	m := t.m
	certs := tc.ConnectionState().PeerCertificates
	ip, ok := trust.Source(raw.RemoteAddr())
	if len(certs) == 0 || !ok {
		return errUnnamed
	}
	leaf := certs[0]
	if leaf.VerifyHostname(ip.String()) == nil {
		return nil
	}
	if len(leaf.DNSNames) > 0 {
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.ChannelIOTimeout)
		defer cancel()
		for _, name := range leaf.DNSNames {
			addrs, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
			for _, a := range addrs {
				if a.Unmap() == ip {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("%w %s", errUnnamed, ip)
}

// minSecret is the shortest ChannelSecret accepted.
const minSecret = 32

// secretTLS builds a TLS configuration from a shared secret: the CA's
// Ed25519 key is derived from the secret, so every member holding it
// builds the same CA, and signs a fresh ECDSA P-256 certificate for this
// member that names host (its BindAddr).
func secretTLS(secret []byte, host string) (*tls.Config, error) {
	if len(secret) < minSecret {
		return nil, fmt.Errorf("%w: ChannelSecret has %d bytes, need at least %d: make one with `openssl rand %d`", ErrSecurity, len(secret), minSecret, minSecret)
	}
	if err := checkRandomKey("ChannelSecret", secret, minSecret); err != nil {
		return nil, err
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, "bucketgrid/olric owner channel CA v1", ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bucketgrid/olric channel CA"},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	var dns []string
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		dns = []string{host}
	}
	now := time.Now()
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "bucketgrid/olric member"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(100, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}},
		RootCAs:      pool,
	}, nil
}

// ErrGossipClear is returned by the gossip key methods of a member started
// without GossipKeys: its gossip is in clear text, and memberlist cannot
// turn encryption on while running.
var ErrGossipClear = errors.New("bucketgrid/olric: gossip encryption is off (no GossipKeys at Start)")

// AddGossipKey installs key (16, 24 or 32 bytes) in the member's gossip
// keyring: from now on the member also accepts gossip encrypted with it,
// and still encrypts with its primary key. Rotating the cluster's key
// without downtime takes three rounds, each completed on every member
// before the next starts: AddGossipKey(new), UseGossipKey(new),
// RemoveGossipKey(old). Keys set this way last until Shutdown; put the new
// key in GossipKeys too, so that a restarted member uses it.
func (m *Member) AddGossipKey(key []byte) error {
	if m.trust.creds.keyring == nil {
		return ErrGossipClear
	}
	return m.trust.creds.keyring.AddKey(key)
}

// UseGossipKey makes key, already installed with AddGossipKey or given in
// GossipKeys, the one the member encrypts gossip with.
func (m *Member) UseGossipKey(key []byte) error {
	if m.trust.creds.keyring == nil {
		return ErrGossipClear
	}
	return m.trust.creds.keyring.UseKey(key)
}

// RemoveGossipKey removes key from the member's keyring: gossip encrypted
// with it is refused from now on. The primary key cannot be removed.
func (m *Member) RemoveGossipKey(key []byte) error {
	if m.trust.creds.keyring == nil {
		return ErrGossipClear
	}
	return m.trust.creds.keyring.RemoveKey(key)
}

// GossipKeys returns the keys of the member's gossip keyring, the primary
// key first, or nil when gossip is in clear text.
func (m *Member) GossipKeys() [][]byte {
	if m.trust.creds.keyring == nil {
		return nil
	}
	var keys [][]byte
	for _, k := range m.trust.creds.keyring.GetKeys() {
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}
