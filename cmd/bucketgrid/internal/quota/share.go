package quota

import "math/bits"

// divide splits capacity tokens among members that want wants[i] each:
// everyone gets their want when the wants fit; otherwise each gets a share
// in proportion to its want (so shares follow demand, never split evenly),
// rounded down and the remainder handed out by largest fraction, and at
// least one token while capacity lasts. The result never sums above
// capacity.
func divide(capacity int64, wants []int64) []int64 {
	out := make([]int64, len(wants))
	var total uint64
	for _, w := range wants {
		total += uint64(max(w, 0))
	}
	if capacity <= 0 || total == 0 {
		return out
	}
	if total <= uint64(capacity) {
		for i, w := range wants {
			out[i] = max(w, 0)
		}
		return out
	}
	// proportional shares, remainders kept for the largest-remainder pass
	rem := make([]uint64, len(wants))
	var given int64
	for i, w := range wants {
		if w <= 0 {
			continue
		}
		hi, lo := bits.Mul64(uint64(capacity), uint64(w))
		q, r := bits.Div64(hi, lo, total)
		out[i], rem[i] = int64(q), r
		given += int64(q)
	}
	// the floor: a member with a want but a share rounded to 0 gets one
	// token first (a new Envoy always gets a share), then the rest by
	// largest remainder
	for i, w := range wants {
		if given >= capacity {
			break
		}
		if w > 0 && out[i] == 0 {
			out[i]++
			given++
			rem[i] = 0
		}
	}
	for given < capacity {
		best := -1
		for i := range rem {
			if rem[i] > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out[best]++
		rem[best] = 0
		given++
	}
	return out
}

// mulDiv returns a×b/c rounded down (up with ceil), for non-negative
// operands and c > 0, saturating at the largest int64.
func mulDiv(a, b, c int64, ceil bool) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if ceil && r > 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}
