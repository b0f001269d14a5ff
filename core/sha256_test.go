package core

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

// sha256Sum must be crypto/sha256, byte for byte: RedactKey and DigestKey
// are SHA-256 by their documentation, and digests stored by earlier builds
// name buckets that must still be found.

func TestSHA256Vectors(t *testing.T) {
	// FIPS 180-4's examples (NIST CSRC, "SHA256.pdf", "SHA2_Additional.pdf")
	// and the padding boundaries: 55 bytes fit one block, 56 need two.
	tests := []struct{ in, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
			"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
			"cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
		{strings.Repeat("a", 1_000_000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
		{"\xbd", "68325720aabd7c82f30f554b313d0570c95accbb7dc4b5aae11204c08ffe732b"},
		{strings.Repeat("\x00", 55), "02779466cdec163811d078815c633f21901413081449002f24aa3e80f0b88ef7"},
		{strings.Repeat("\x00", 56), "d4817aa5497628e7c77e6b606107042bbba3130888c5f47a375e6179be789fbb"},
		{strings.Repeat("\x00", 1000), "541b3e9daa09b20bf85fa273e5cbd3e80185aa4ec298e765db87742b70138a53"},
	}
	for _, tt := range tests {
		got := sha256Sum(tt.in)
		if h := hex.EncodeToString(got[:]); h != tt.want {
			t.Errorf("sha256Sum(%.20q, %d bytes) = %s, want %s", tt.in, len(tt.in), h, tt.want)
		}
		if got != sha256.Sum256([]byte(tt.in)) {
			t.Errorf("sha256Sum(%.20q, %d bytes) differs from crypto/sha256", tt.in, len(tt.in))
		}
	}
}

// TestSHA256EveryLength covers every way a message ends against the block:
// all lengths through 300 bytes (four blocks and a bit), random bytes.
func TestSHA256EveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 300)
	for n := 0; n <= len(b); n++ {
		for range 4 {
			for i := range n {
				b[i] = byte(r.Uint32())
			}
			if got, want := sha256Sum(string(b[:n])), sha256.Sum256(b[:n]); got != want {
				t.Fatalf("sha256Sum(%x) = %x, want %x", b[:n], got, want)
			}
		}
	}
}

func FuzzSHA256(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("abc"))
	f.Add(make([]byte, 55))
	f.Add(make([]byte, 56))
	f.Add(make([]byte, 64))
	f.Add(make([]byte, 119))
	f.Add(make([]byte, 120))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := sha256Sum(string(b)), sha256.Sum256(b); got != want {
			t.Fatalf("sha256Sum(%x) = %x, want %x", b, got, want)
		}
	})
}

func BenchmarkSHA256(b *testing.B) {
	key := strings.Repeat("k", 200)
	b.Run("core", func(b *testing.B) {
		for b.Loop() {
			sha256Sum(key)
		}
	})
	b.Run("crypto", func(b *testing.B) {
		for b.Loop() {
			sha256.Sum256([]byte(key))
		}
	})
}
