package tck

import (
	"testing"
	"unicode/utf8"
)

// TestMultibyteStraddles pins the key helper the multi-byte key groups rely
// on: exactly n+j bytes, valid UTF-8, and for j ≥ 1 a character that
// crosses the cut after n-1 bytes (a column of n-1 bytes keeps half of it).
// The helper it replaced stopped up to len(r)-1 bytes short of n, so the
// group meant to cross a 250-byte column held keys of 248–250 bytes.
func TestMultibyteStraddles(t *testing.T) {
	base := "tck-run-0123456789"
	for _, r := range []string{"é", "日", "😀"} {
		for _, n := range []int{64, 65, 129, 251, 1025} {
			for j := range len(r) {
				k := multibyte(base, n, r, j, 'x')
				if len(k) != n+j {
					t.Fatalf("multibyte(%d, %q, %d): %d bytes, want %d", n, r, j, len(k), n+j)
				}
				if !utf8.ValidString(k) || k[len(k)-1] != 'x' || k[:len(base)] != base {
					t.Fatalf("multibyte(%d, %q, %d) = %q: not base + characters + last", n, r, j, k)
				}
				straddles := !utf8.RuneStart(k[n-1])
				if straddles != (j > 0) {
					t.Errorf("multibyte(%d, %q, %d): a character crosses the cut after %d bytes: %v, want %v", n, r, j, n-1, straddles, j > 0)
				}
			}
		}
	}
}
