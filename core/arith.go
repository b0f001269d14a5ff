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

// scale returns floor(v*num/den) for den > 0, num ≥ 0, saturated to the
// int64 range. v may be negative.
func scale(v, num, den int64) int64 {
	neg := v < 0
	mag := uint64(v)
	if neg {
		mag = -mag
	}
	hi, lo := bits.Mul64(mag, uint64(num))
	if hi >= uint64(den) {
		if neg {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(den))
	if neg {
		if r != 0 {
			q++
		}
		if q > 1<<63 {
			return math.MinInt64
		}
		return -int64(q)
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
