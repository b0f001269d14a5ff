// Package header writes the rate-limit header fields of bucketgrid's front
// doors (the service, the Envoy filter, httplimit): RateLimit-Policy and
// RateLimit (draft-ietf-httpapi-ratelimit-headers, as RFC 9651 structured
// fields), the single-valued X-RateLimit-* and RateLimit-* fields, and the
// rounding of waits to whole seconds. It is the one copy of that code, kept
// internal: policy's Decision carries the fields a door writes, and httplimit
// reports its own limits with it.
package header

import (
	"math"
	"strconv"
	"time"
)

// Set selects the header fields to write; policy.Headers has the same bits.
type Set uint8

const (
	// IETF is RateLimit-Policy and RateLimit.
	IETF Set = 1 << iota
	// XRateLimit is X-RateLimit-Limit, -Remaining and -Reset.
	XRateLimit
	// Draft is RateLimit-Limit, -Remaining and -Reset.
	Draft
)

// Quota is one limit as the headers report it.
type Quota struct {
	// Name identifies the limit in the IETF fields.
	Name string
	// Limit is its quota: q of RateLimit-Policy and X-RateLimit-Limit.
	Limit int64
	// Window is w of RateLimit-Policy: the seconds an empty limit takes to
	// be whole again.
	Window int64
	// Remaining is r of RateLimit and X-RateLimit-Remaining.
	Remaining int64
	// Reset is t of RateLimit in seconds: until the request could succeed
	// when refused, else until the limit is whole; negative when no wait
	// admits the request, and then left out.
	Reset int64
	// Full is X-RateLimit-Reset and RateLimit-Reset in seconds: until the
	// limit is whole again.
	Full int64
	// Over reports that this limit refused the request.
	Over bool
}

// maxSFInteger is the largest RFC 9651 Integer (15 digits).
const maxSFInteger = 999_999_999_999_999

func clampSF(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// Seconds returns d in whole seconds, rounded up so that a client waiting
// that long never comes back before the time has passed; 0 for d ≤ 0,
// negative (never) for the largest Duration.
func Seconds(d time.Duration) int64 {
	if d == math.MaxInt64 {
		return -1
	}
	return CeilSeconds(d)
}

// RetryAfter returns the Retry-After delay-seconds of a refusal that
// waiting wait admits: wait rounded up to whole seconds, at least 1, so it
// never points before the refill. ok is false when no wait admits it
// (wait is math.MaxInt64, the largest Duration).
func RetryAfter(wait time.Duration) (secs int64, ok bool) {
	if wait == math.MaxInt64 {
		return 0, false
	}
	return min(max(CeilSeconds(wait), 1), maxSFInteger), true
}

// CeilSeconds returns d in whole seconds, rounded up; 0 for d ≤ 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// describe returns the index of the quota the single-valued headers
// (XRateLimit, Draft) describe, as envoyproxy/ratelimit
// chooses it: the last one that refused the request, else the first of
// those with the fewest remaining; -1 for none.
func describe(qs []Quota) int {
	best := -1
	for i := range qs {
		switch {
		case qs[i].Over:
			best = i
		case best >= 0 && qs[best].Over:
		case best < 0 || qs[i].Remaining < qs[best].Remaining:
			best = i
		}
	}
	return best
}

// appendSFString appends s as an RFC 9651 String. Bytes a String cannot hold
// (controls, DEL, non-ASCII) are replaced by '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func appendParam(b []byte, name string, v int64) []byte {
	b = append(b, ';')
	b = append(b, name...)
	b = append(b, '=')
	return strconv.AppendInt(b, clampSF(v), 10)
}

// AppendPolicy appends the RateLimit-Policy value of qs to b: one item
// per quota, "name";q=limit;w=window.
func AppendPolicy(b []byte, qs []Quota) []byte {
	for i := range qs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, qs[i].Name)
		b = appendParam(b, "q", qs[i].Limit)
		b = appendParam(b, "w", qs[i].Window)
	}
	return b
}

// AppendRateLimit appends the RateLimit value of qs to b: one item
// per quota, "name";r=remaining;t=reset (t left out when negative).
func AppendRateLimit(b []byte, qs []Quota) []byte {
	for i := range qs {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, qs[i].Name)
		b = appendParam(b, "r", qs[i].Remaining)
		if qs[i].Reset >= 0 {
			b = appendParam(b, "t", qs[i].Reset)
		}
	}
	return b
}

// Append appends to dst the fields which selects for qs: the IETF fields
// with every quota, the single-valued ones of the quota describe chooses;
// names are lower case, as HTTP/2 requires. It appends nothing for no quota.
func Append[F ~struct{ Name, Value string }](dst []F, qs []Quota, which Set) []F {
	if len(qs) == 0 {
		return dst
	}
	if which&IETF != 0 {
		// both values in one string: one allocation
		var buf [256]byte
		b := AppendPolicy(buf[:0], qs)
		n := len(b)
		both := string(AppendRateLimit(b, qs))
		dst = append(dst, F{"ratelimit-policy", both[:n]}, F{"ratelimit", both[n:]})
	}
	if which&(XRateLimit|Draft) == 0 {
		return dst
	}
	q := &qs[describe(qs)]
	vals := [3]string{strconv.FormatInt(clampSF(q.Limit), 10), strconv.FormatInt(clampSF(q.Remaining), 10),
		strconv.FormatInt(clampSF(q.Full), 10)}
	for _, f := range singleValued {
		if which&f.which != 0 {
			for i, name := range f.names {
				dst = append(dst, F{name, vals[i]})
			}
		}
	}
	return dst
}

// singleValued are the names of the single-valued fields: limit,
// remaining, reset.
var singleValued = [...]struct {
	which Set
	names [3]string
}{
	{XRateLimit, [3]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}},
	{Draft, [3]string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}},
}
