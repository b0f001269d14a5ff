package core

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInvalidKey(t *testing.T) {
	key := "sk_live_" + strings.Repeat("s3cr3t", 50)
	err := InvalidKey(key, "longer than 250 bytes")
	if !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("errors.Is(%v, ErrInvalidKey) = false", err)
	}
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("errors.As(%v, *KeyError) = false", err)
	}
	if ke.Len != len(key) || ke.Key != RedactKey(key) || ke.Reason != "longer than 250 bytes" {
		t.Fatalf("KeyError = %+v", *ke)
	}
	want := "bucketgrid: invalid key " + RedactKey(key) + ": longer than 250 bytes"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("the error reveals the key: %q", err.Error())
	}
}

func TestRedactKey(t *testing.T) {
	tests := []struct{ key, want string }{
		{"", "sha256:e3b0c44298fc(0 bytes)"},
		{"hello", "sha256:2cf24dba5fb0(5 bytes)"},
		{"\xff\xfe", "sha256:" + sha256Hex("\xff\xfe")[:12] + "(2 bytes)"},
	}
	for _, tt := range tests {
		if got := RedactKey(tt.key); got != tt.want {
			t.Errorf("RedactKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	// The result depends on the key only through its digest and length: no
	// substring of a random key of 8 bytes or more shows up in it.
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		key := randomKey(r, 8+r.IntN(300))
		got := RedactKey(key)
		if strings.Contains(got, key[:8]) || !utf8.ValidString(got) {
			t.Fatalf("RedactKey(%q) = %q reveals the key", key, got)
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestDigestKey(t *testing.T) {
	for _, key := range []string{"", "a", strings.Repeat("k", 10_000), "\xff"} {
		d := DigestKey(key)
		if len(d) != DigestKeyLen || d[0] != DigestMarker || !utf8.ValidString(d) {
			t.Fatalf("DigestKey(%.20q) = %q: want %d bytes of ASCII starting with %q", key, d, DigestKeyLen, DigestMarker)
		}
		if strings.ContainsAny(d[1:], "+/=#") {
			t.Fatalf("DigestKey(%.20q) = %q is not unpadded base64url", key, d)
		}
	}
	// SHA-256("") in base64url: 47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU.
	if got, want := DigestKey(""), "#47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"; got != want {
		t.Fatalf("DigestKey(\"\") = %q, want %q", got, want)
	}
}

func TestFitKey(t *testing.T) {
	const maxLen = 250
	long := strings.Repeat("x", maxLen+1)
	tests := []struct {
		name    string
		key     string
		literal bool
	}{
		{"empty", "", true},
		{"short", "client-1", true},
		{"at the limit", long[:maxLen], true},
		{"one byte over", long, false},
		{"invalid UTF-8", "a\xffb", false},
		{"starts with the marker", "#abc", false},
		{"a long key's digest", DigestKey(long), false},
		{"marker later", "a#b", true},
		{"multibyte at the limit", strings.Repeat("é", maxLen/2), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, literal := FitKey(tt.key, maxLen)
			if literal != tt.literal {
				t.Fatalf("FitKey(%.20q) literal = %v, want %v", tt.key, literal, tt.literal)
			}
			want := tt.key
			if !literal {
				want = DigestKey(tt.key)
			}
			if got != want {
				t.Fatalf("FitKey(%.20q) = %q, want %q", tt.key, got, want)
			}
		})
	}
}

// TestFitKeyDigestCannotPose is the attack of a key posing as a digest: a short header value
// equal to a long key's digest must not land in that long key's bucket.
func TestFitKeyDigestCannotPose(t *testing.T) {
	const maxLen = 64
	long := "api-key-" + strings.Repeat("0123456789", 20)
	bucket, _ := FitKey(long, maxLen)
	if bucket != DigestKey(long) {
		t.Fatalf("FitKey(long) = %q, want its digest", bucket)
	}
	posed, literal := FitKey(bucket, maxLen)
	if literal || posed == bucket {
		t.Fatalf("FitKey(%q) = %q, %v: the digest reaches the long key's bucket", bucket, posed, literal)
	}
}

func TestFitKeyPanicsBelowDigestLen(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("FitKey with maxLen < DigestKeyLen did not panic")
		}
	}()
	FitKey("k", DigestKeyLen-1)
}

// TestFitKeyInjective is a property test: over random keys of every kind
// (short, long, invalid UTF-8, starting with the marker, digests of the
// others) FitKey never maps two different keys to one result, and every
// result fits the limit and is valid UTF-8.
func TestFitKeyInjective(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, maxLen := range []int{DigestKeyLen, 64, 250} {
		seen := make(map[string]string)
		add := func(key string) {
			got, _ := FitKey(key, maxLen)
			if len(got) > maxLen || !utf8.ValidString(got) {
				t.Fatalf("FitKey(%.20q, %d) = %q: over the limit or not UTF-8", key, maxLen, got)
			}
			if prev, ok := seen[got]; ok && prev != key {
				t.Fatalf("FitKey(%.30q) = FitKey(%.30q) = %q", prev, key, got)
			}
			seen[got] = key
		}
		for range 5000 {
			key := randomKey(r, r.IntN(2*maxLen))
			add(key)
			add(string(DigestMarker) + key)
			add(DigestKey(key))
			d, _ := FitKey(key, maxLen)
			add(d)
		}
	}
}

// randomKey returns n random bytes biased towards printable ASCII and the
// marker, with some invalid UTF-8.
func randomKey(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		switch r.IntN(10) {
		case 0:
			b[i] = byte(r.IntN(256))
		case 1:
			b[i] = DigestMarker
		default:
			b[i] = byte('a' + r.IntN(26))
		}
	}
	return string(b)
}

func FuzzFitKey(f *testing.F) {
	long := strings.Repeat("k", 300)
	f.Add("", long)
	f.Add(long, DigestKey(long))
	f.Add("#", "\xff")
	f.Fuzz(func(t *testing.T, a, b string) {
		fa, _ := FitKey(a, 250)
		fb, _ := FitKey(b, 250)
		if a != b && fa == fb {
			t.Fatalf("FitKey(%q) = FitKey(%q) = %q", a, b, fa)
		}
		if len(fa) > 250 || !utf8.ValidString(fa) {
			t.Fatalf("FitKey(%q) = %q", a, fa)
		}
	})
}

// A backend that holds keys of at most 250 bytes keeps short keys as they
// are and digests the rest into a namespace no literal key can reach.
func ExampleFitKey() {
	short, ok := FitKey("client-42", 250)
	fmt.Println(short, ok)
	long, ok := FitKey(strings.Repeat("k", 300), 250)
	fmt.Println(len(long), long[:1], ok)
	fmt.Println(InvalidKey("client-42", "longer than 8 bytes"))
	// Output:
	// client-42 true
	// 44 # false
	// bucketgrid: invalid key sha256:3654483f6838(9 bytes): longer than 8 bytes
}

func TestAppendBase64URL(t *testing.T) {
	p := make([]byte, 70)
	for i := range p {
		p[i] = byte(i*37 + 11)
	}
	for n := range len(p) {
		if got, want := string(appendBase64URL(nil, p[:n])), base64.RawURLEncoding.EncodeToString(p[:n]); got != want {
			t.Fatalf("%d bytes: %q, want %q", n, got, want)
		}
	}
}
