package olric

import (
	"errors"
	"fmt"
)

// ErrWeakSecret is returned by Start (wrapped, with ErrSecurity) for a
// ChannelSecret, gossip key or Password that does not look random: one made
// of printable text (a passphrase, or a key still in hex or base64), one
// that repeats few distinct byte values, or one that is too short. Such a
// secret can be guessed: a member's certificate lets whoever connects test
// ChannelSecret guesses offline, and gossip keys decrypt captured traffic.
var ErrWeakSecret = errors.New("bucketgrid/olric: secret is not random")

// checkRandomKey refuses a binary key (ChannelSecret, a gossip key) that is
// text or repeats few byte values. A key of n random bytes is printable
// text with probability (95/256)^n, under 1e-13 for n ≥ 16, and has fewer
// than n/2 distinct bytes with a probability smaller still, so a random key
// is never refused.
func checkRandomKey(field string, b []byte, size int) error {
	how := fmt.Sprintf("make one with `openssl rand %d` (raw bytes; decode `openssl rand -base64 %d` before use)", size, size)
	if textLike(b) {
		return fmt.Errorf("%w: %w: %s is printable text (a passphrase, or a key still encoded): %s", ErrSecurity, ErrWeakSecret, field, how)
	}
	if d := distinct(b); d < (len(b)+1)/2 {
		return fmt.Errorf("%w: %w: %s has only %d distinct byte values in %d bytes: %s", ErrSecurity, ErrWeakSecret, field, d, len(b), how)
	}
	return nil
}

// minPassword is the shortest Password accepted, and minPasswordDistinct
// the fewest distinct characters it may have: 20 characters of base32
// (`openssl rand -base64 16`, rand.Text) carry 100 bits or more.
const (
	minPassword         = 20
	minPasswordDistinct = 10
)

// checkPassword refuses an Olric password that is short or repeats few
// characters. Olric v0.7.4 does not limit AUTH attempts on its own port,
// so the password's length is what bounds online guessing there.
func checkPassword(p string) error {
	const how = "make one with `openssl rand -base64 24`"
	if len(p) < minPassword {
		return fmt.Errorf("%w: %w: Password has %d characters, need at least %d: %s", ErrSecurity, ErrWeakSecret, len(p), minPassword, how)
	}
	if d := distinct([]byte(p)); d < minPasswordDistinct {
		return fmt.Errorf("%w: %w: Password has only %d distinct characters: %s", ErrSecurity, ErrWeakSecret, d, how)
	}
	return nil
}

// textLike reports whether every byte of b is printable ASCII or white
// space.
func textLike(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// distinct returns the number of distinct byte values in b.
func distinct(b []byte) int {
	var seen [256]bool
	n := 0
	for _, c := range b {
		if !seen[c] {
			seen[c] = true
			n++
		}
	}
	return n
}
