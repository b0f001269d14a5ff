package trust

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
)

// Revocations are the certificates of a revocation list: by serial number
// (as big-endian hex digits) and by SHA-256 fingerprint of the DER.
type Revocations struct {
	serials map[string]bool
	prints  map[[sha256.Size]byte]bool
}

// Has reports whether c is on the list.
func (r *Revocations) Has(c *x509.Certificate) bool {
	return r.prints[sha256.Sum256(c.Raw)] || r.serials[serialKey(c.SerialNumber)]
}

func serialKey(n *big.Int) string { return n.Text(16) }

// ParseRevocations parses a revocation list: one certificate a line, as
// its SHA-256 fingerprint (64 hex digits, as `openssl x509 -fingerprint
// -sha256` prints it, colons allowed) or its serial number (at most 40 hex
// digits, as `openssl x509 -serial` prints it, "serial=" allowed); blank
// lines and text after '#' are ignored. Any other line is an error naming
// it.
func ParseRevocations(raw []byte) (*Revocations, error) {
	r := &Revocations{serials: map[string]bool{}, prints: map[[sha256.Size]byte]bool{}}
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
