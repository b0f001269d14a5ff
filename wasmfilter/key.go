package wasmfilter

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"unicode/utf8"
)

// key builds the bucket key of the current request under pol: the policy
// name and each configured part, NUL-separated. path is the :path as the
// configuration reads it. A key the store cannot hold verbatim is digested
// (fitKey), so that every request has a key the store accepts.
func (p *Plugin) key(pol *policy, path string) (string, error) {
	var b strings.Builder
	b.WriteString(pol.name)
	for _, part := range pol.key {
		b.WriteByte(0)
		switch part.kind {
		case keySourceAddress:
			v, found, err := p.host.Property("source", "address")
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			if found {
				b.WriteString(hostOf(string(v)))
			}
		case keyPath:
			b.WriteString(path)
		case keyHeader:
			v, _, err := p.host.Header(RequestHeaders, part.name)
			if err != nil && !errors.Is(err, StatusNotFound) {
				return "", err
			}
			b.WriteString(v)
		}
	}
	return fitKey(b.String()), nil
}

// fitKey returns key unchanged when it is at most MaxKeyLen bytes of valid
// UTF-8 not starting with '#', and otherwise '#' and the hex SHA-256 of key.
// Literal keys start with a policy name, never with '#', so no literal key
// reaches a digest's bucket. TODO(w0): core.FitKey.
func fitKey(key string) string {
	if len(key) <= MaxKeyLen && utf8.ValidString(key) && !strings.HasPrefix(key, "#") {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "#" + hex.EncodeToString(sum[:])
}

// errInvalidKey is the error for a key the store cannot hold. TODO(w0):
// core.InvalidKey.
func errInvalidKey(string) error { return errInvalidKeySentinel }

var errInvalidKeySentinel = errors.New("wasmfilter: invalid key")

// hostOf strips the port from an Envoy address: "10.0.0.1:5000" →
// "10.0.0.1", "[::1]:5000" → "::1". Other forms are returned unchanged.
func hostOf(addr string) string {
	if strings.HasPrefix(addr, "[") {
		if end := strings.IndexByte(addr, ']'); end > 0 {
			return addr[1:end]
		}
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr, ':') == i {
		return addr[:i]
	}
	return addr
}
