package core

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Keys are the client's input (an API key, an address, a header value), so
// they are hostile: a backend refuses a key it cannot hold with a *KeyError
// before any I/O, and nothing prints a key's bytes (RedactKey).

// ErrInvalidKey is the error every *KeyError wraps: a key a backend cannot
// hold (too long, not valid UTF-8, …). It is the client's error, never an
// outage: it must not be retried, and a fail-open policy must not admit the
// request (an HTTP middleware answers 400). Check it with errors.Is.
var ErrInvalidKey = errors.New("bucketgrid: invalid key")

// KeyError describes an invalid key without revealing it. Its Unwrap returns
// ErrInvalidKey.
type KeyError struct {
	// Key is RedactKey of the key: never the key's bytes.
	Key string
	// Len is the key's length in bytes.
	Len int
	// Reason says which rule the key breaks, e.g. "longer than 250 bytes".
	Reason string
}

// Error returns "bucketgrid: invalid key <redacted>: <reason>".
func (e *KeyError) Error() string {
	return ErrInvalidKey.Error() + " " + e.Key + ": " + e.Reason
}

// Unwrap returns ErrInvalidKey.
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// InvalidKey returns a *KeyError for key, which breaks the rule reason: the
// error a backend returns, before any I/O, for a key it cannot hold. The
// error holds RedactKey(key) and len(key), never the key.
func InvalidKey(key, reason string) error {
	return &KeyError{Key: RedactKey(key), Len: len(key), Reason: reason}
}

// RedactKey returns what logs and error messages show instead of key:
// "sha256:" followed by the first 12 hex digits of the key's SHA-256 and its
// length, e.g. "sha256:2cf24dba5fb0(5 bytes)". It never contains the key's
// bytes, yet tells one key from another in practice (48 bits of digest), so
// an operator can correlate lines about the same client. An empty key is
// "sha256:e3b0c44298fc(0 bytes)".
func RedactKey(key string) string {
	sum := sha256Sum(key)
	b := make([]byte, 0, len("sha256:")+12+len("( bytes)")+20)
	b = append(b, "sha256:"...)
	for _, c := range sum[:6] {
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	b = append(b, '(')
	b = strconv.AppendInt(b, int64(len(key)), 10)
	b = append(b, " bytes)"...)
	return string(b)
}

const hexDigits = "0123456789abcdef"

// DigestMarker is the first byte of every DigestKey result. FitKey digests
// every key that starts with it, so no literal key can pose as a digest.
const DigestMarker = '#'

// DigestKeyLen is the length of every DigestKey result in bytes: the marker
// and 43 characters of unpadded base64url.
const DigestKeyLen = 1 + 43

// DigestKey returns DigestMarker followed by the unpadded base64url encoding
// (RFC 4648 §5) of SHA-256(key): DigestKeyLen bytes of ASCII, whatever key's
// length or encoding. Use it through FitKey, which keeps the digests in a
// namespace of their own.
func DigestKey(key string) string {
	sum := sha256Sum(key)
	b := make([]byte, 1, DigestKeyLen)
	b[0] = DigestMarker
	return string(appendBase64URL(b, sum[:]))
}

// base64URL is the alphabet of RFC 4648 §5.
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// appendBase64URL appends the unpadded base64url encoding of p: what
// encoding/base64's RawURLEncoding gives, without that package (5 KB of
// the .wasm).
func appendBase64URL(dst, p []byte) []byte {
	for len(p) >= 3 {
		v := uint(p[0])<<16 | uint(p[1])<<8 | uint(p[2])
		dst = append(dst, base64URL[v>>18&63], base64URL[v>>12&63], base64URL[v>>6&63], base64URL[v&63])
		p = p[3:]
	}
	switch len(p) {
	case 2:
		v := uint(p[0])<<16 | uint(p[1])<<8
		dst = append(dst, base64URL[v>>18&63], base64URL[v>>12&63], base64URL[v>>6&63])
	case 1:
		v := uint(p[0]) << 16
		dst = append(dst, base64URL[v>>18&63], base64URL[v>>12&63])
	}
	return dst
}

// FitKey maps a client's key to a key a backend with a length limit of
// maxLen bytes and a UTF-8 rule can hold, without letting two client keys
// share a bucket. It returns (key, true) when len(key) ≤ maxLen, key is valid
// UTF-8 and key does not start with DigestMarker; otherwise it returns
// (DigestKey(key), false). The result is always valid UTF-8 of at most
// maxLen bytes.
//
// FitKey is injective up to SHA-256 collisions: a result that does not start
// with DigestMarker is the key itself, so two such results are equal only
// for equal keys; a result that starts with DigestMarker is always a digest
// (every literal key that starts with the marker is digested too), so it
// equals another digest only by a SHA-256 collision and never equals a
// literal key. A client can therefore not reach a long key's bucket by
// sending that key's digest: the digest, which starts with the marker, is
// digested again.
//
// Apply FitKey once, to the client's key: it is not idempotent (a digest
// passed back in is digested again). FitKey panics if maxLen < DigestKeyLen,
// a limit no digest fits; a backend's limit minus its own key prefix is a
// constant, so this is a programming error caught by the first test.
func FitKey(key string, maxLen int) (string, bool) {
	if maxLen < DigestKeyLen {
		panic("core.FitKey: maxLen " + strconv.Itoa(maxLen) + " is below DigestKeyLen")
	}
	if len(key) <= maxLen && utf8.ValidString(key) && (key == "" || key[0] != DigestMarker) {
		return key, true
	}
	return DigestKey(key), false
}
