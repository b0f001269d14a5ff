package core

import (
	"math"
	"math/bits"
)

// Integer helpers. Token counts and times are int64; intermediate products
// use 128 bits so that no combination of valid inputs overflows silently.

// satAdd returns a+b clamped to the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// diff returns a-b for a ≥ b as an unsigned value; it never overflows.
func diff(a, b int64) uint64 { return uint64(a) - uint64(b) }

// mulDiv returns floor(a*b/d) and (a*b)%d for unsigned operands, with ok=false
// when the quotient does not fit in 64 bits.
func mulDiv(a, b, d uint64) (q, r uint64, ok bool) { return mulAddDiv(a, b, 0, d) }

// mulAddDiv returns floor((a*b+c)/d) and its remainder, ok=false on a quotient
// beyond 64 bits.
func mulAddDiv(a, b, c, d uint64) (q, r uint64, ok bool) {
	hi, lo := bits.Mul64(a, b)
	var carry uint64
	lo, carry = bits.Add64(lo, c, 0)
	hi += carry
	if hi == 0 {
		return lo / d, lo % d, true
	}
	if hi >= d {
		return 0, 0, false
	}
	q, r = bits.Div64(hi, lo, d)
	return q, r, true
}

// ceilMulSubDiv returns ceil((a*b - c)/d) for a*b ≥ c, saturated to
// math.MaxInt64.
func ceilMulSubDiv(a, b, c, d uint64) int64 {
	hi, lo := bits.Mul64(a, b)
	var borrow uint64
	lo, borrow = bits.Sub64(lo, c, 0)
	hi -= borrow
	// add d-1 for the ceiling
	var carry uint64
	lo, carry = bits.Add64(lo, d-1, 0)
	hi += carry
	if hi >= d {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, d)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulSat returns a*b for non-negative operands, saturated to math.MaxInt64.
func mulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// scaleWithFraction returns floor(v) and floor(frac(v)×p2) for
// v = (size + r/p) × c2/c: a size with a fraction r/p of a token, scaled by
// c2/c. It requires 0 ≤ r < p, size < c and positive p, c, c2, p2; then
// v < c2, so only a negative v can fall outside the int64 range, and that
// saturates to math.MinInt64 with no fraction.
//
// The product (size×p + r)×c2 needs up to 190 bits; it is split so that
// every step fits 128: with r×c2 = qr×p + rr, v×c = size×c2 + qr + rr/p, and
// as size×c2 + qr is an integer, floor(v) = floor((size×c2 + qr)/c) with
// remainder m; the fraction of v is then (m + rr/p)/c, and likewise
// floor(frac×p2) = floor((p2×m + floor(p2×rr/p))/c).
func scaleWithFraction(size, r, p, c, c2, p2 int64) (int64, int64) {
	qr, rr, _ := mulDiv(uint64(r), uint64(c2), uint64(p)) // qr < c2
	var q, m uint64
	if size >= 0 {
		hi, lo := bits.Mul64(uint64(size), uint64(c2))
		var carry uint64
		lo, carry = bits.Add64(lo, qr, 0)
		q, m = bits.Div64(hi+carry, lo, uint64(c)) // quotient < c2
	} else {
		// -(size×c2 + qr) > 0, as qr < c2 ≤ -size×c2; floor of a negative
		// quotient is minus the ceiling of its magnitude
		hi, lo := bits.Mul64(-uint64(size), uint64(c2))
		var borrow uint64
		lo, borrow = bits.Sub64(lo, qr, 0)
		hi -= borrow
		if hi >= uint64(c) {
			return math.MinInt64, 0
		}
		var rem uint64
		q, rem = bits.Div64(hi, lo, uint64(c))
		if rem != 0 {
			q, m = q+1, uint64(c)-rem
		}
		if q > 1<<63 {
			return math.MinInt64, 0
		}
		q = -q // two's complement: int64(q) is the negative size
	}
	t, _, _ := mulDiv(uint64(p2), rr, uint64(p)) // t < p2
	hi, lo := bits.Mul64(uint64(p2), m)
	var carry uint64
	lo, carry = bits.Add64(lo, t, 0)
	frac, _ := bits.Div64(hi+carry, lo, uint64(c)) // < p2, as m < c
	return int64(q), int64(frac)
}
