package core

import (
	"math"
	"time"
)

// Share returns the configuration of one of n instances that split c's
// limit between them while they cannot reach the bucket they share: each
// bandwidth's capacity divided by n, and its refill rate divided by n, so
// that n instances each deciding from a bucket of the share admit together
// about what one bucket of c admits. n ≤ 1 returns a copy of c.
//
// Rounding never takes a share to zero and never lets the n shares together
// fall below c: a capacity is divided rounding up (at least 1 token; the n
// capacities sum to less than c's capacity + n), and so are initial tokens.
// Refill is divided exactly where it can be: refillTokens/n per period when n
// divides refillTokens, else refillTokens/g every n/g periods with g their
// greatest common divisor (the same rate, refilled in coarser steps). The
// aligned intervally styles keep their period, whose instants are the point
// of them, and take refillTokens/n rounded up: the shares together refill
// fewer than n extra tokens per period. So does an intervally bandwidth
// whose stretched refill would exceed the share's capacity (the excess would
// be capped away), and any bandwidth whose stretched period would not fit in
// int64 nanoseconds. IDs and refill styles
// are kept; a valid c gives a valid share.
func (c *Config) Share(n int) Config {
	out := c.Clone()
	if n <= 1 {
		return out
	}
	k := int64(n)
	for i := range out.Bandwidths {
		b := &out.Bandwidths[i]
		b.Capacity = ceilShare(b.Capacity, k)
		if b.HasInitialTokens {
			b.InitialTokens = ceilShare(b.InitialTokens, k)
		}
		b.RefillTokens, b.RefillPeriod = shareRefill(b, k)
	}
	return out
}

// shareRefill returns the refill of one of k shares of b (k ≥ 2, b valid,
// its capacity already the share's).
func shareRefill(b *Bandwidth, k int64) (int64, time.Duration) {
	r, p := b.RefillTokens, b.RefillPeriod
	g := gcd(r, k)
	stretch := k / g
	if stretch == 1 {
		return r / k, p
	}
	// An intervally refill adds its tokens at once: stretched beyond the
	// share's capacity, they would be capped away.
	lossy := b.Style.intervally() && r/g > b.Capacity
	if b.Style.aligned() || lossy || int64(p) > math.MaxInt64/stretch {
		return ceilShare(r, k), p
	}
	return r / g, p * time.Duration(stretch)
}

// ShareOf returns one of n instances' share of a count of tokens, as Share
// divides a capacity: ⌈a/n⌉, 0 for a = 0, a itself for n ≤ 1. Layers that
// describe a shared bucket (a limit, a window's tokens) round with it.
func ShareOf(a int64, n int) int64 {
	if n <= 1 {
		return a
	}
	return ceilShare(a, int64(n))
}

// SeenShareOf returns one of n instances' share of a count of tokens seen
// left in a shared bucket: ⌊a/n⌋, rounded down below zero too (a bucket in
// debt), a itself for n ≤ 1. Where ShareOf rounds up so that shares never
// fall below their whole, SeenShareOf rounds down so that the n shares
// together never hold more than was seen.
func SeenShareOf(a int64, n int) int64 {
	if n <= 1 {
		return a
	}
	k := int64(n)
	q := a / k
	if a < 0 && a%k != 0 {
		q--
	}
	return q
}

// ceilShare returns ⌈a/k⌉ for a ≥ 0, k ≥ 1, without overflow.
func ceilShare(a, k int64) int64 {
	if a == 0 {
		return 0
	}
	return (a-1)/k + 1
}

// gcd returns the greatest common divisor of a, b > 0.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
