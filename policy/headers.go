package policy

import (
	"math"
	"strconv"
	"time"
)

// Headers selects the rate-limit header fields a front door writes.
type Headers uint8

const (
	// IETFHeaders writes RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers, -08 and later) as RFC 9651
	// structured-field lists with one item per limit.
	IETFHeaders Headers = 1 << iota
	// XRateLimitHeaders writes the de facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset of the described limit
	// (see describe).
	XRateLimitHeaders
	// DraftHeaders writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset of the described limit: the names of the draft's
	// early versions, which envoyproxy/ratelimit writes
	// (LIMIT_RESPONSE_HEADERS_ENABLED) and a drop-in's clients may parse.
	DraftHeaders
	// RetryAfterHeader writes Retry-After on a refusal: the longest of
	// the refusing limits' waits, in whole seconds (see RetryAfter).
	// envoyproxy/ratelimit never sends it.
	RetryAfterHeader
)

// Header is one header field; Name is lower case, as HTTP/2 requires.
type Header struct {
	Name, Value string
}

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
	return ceilSeconds(d)
}

// RetryAfter returns the Retry-After delay-seconds of a refusal that
// waiting wait admits: wait rounded up to whole seconds, at least 1, so it
// never points before the refill. ok is false when no wait admits it
// (wait is math.MaxInt64, the largest Duration).
func RetryAfter(wait time.Duration) (secs int64, ok bool) {
	if wait == math.MaxInt64 {
		return 0, false
	}
	return min(max(ceilSeconds(wait), 1), maxSFInteger), true
}

// describe returns the index of the quota the single-valued headers
// (XRateLimitHeaders, DraftHeaders) describe, as envoyproxy/ratelimit
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

// AppendPolicyField appends the RateLimit-Policy value of qs to b: one item
// per quota, "name";q=limit;w=window.
func AppendPolicyField(b []byte, qs []Quota) []byte {
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

// AppendRateLimitField appends the RateLimit value of qs to b: one item
// per quota, "name";r=remaining;t=reset (t left out when negative).
func AppendRateLimitField(b []byte, qs []Quota) []byte {
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

// AppendHeaders appends to dst the fields which selects for qs: the IETF
// fields with every quota, the single-valued ones of the quota describe
// chooses. It appends nothing for no quota.
func AppendHeaders(dst []Header, qs []Quota, which Headers) []Header {
	if len(qs) == 0 {
		return dst
	}
	if which&IETFHeaders != 0 {
		var buf [256]byte
		pol := string(AppendPolicyField(buf[:0], qs))
		rl := string(AppendRateLimitField(buf[:0], qs))
		dst = append(dst, Header{"ratelimit-policy", pol}, Header{"ratelimit", rl})
	}
	if which&(XRateLimitHeaders|DraftHeaders) == 0 {
		return dst
	}
	q := &qs[describe(qs)]
	vals := [3]string{strconv.FormatInt(clampSF(q.Limit), 10), strconv.FormatInt(clampSF(q.Remaining), 10),
		strconv.FormatInt(clampSF(q.Full), 10)}
	for _, f := range singleValued {
		if which&f.which != 0 {
			for i, name := range f.names {
				dst = append(dst, Header{name, vals[i]})
			}
		}
	}
	return dst
}

// singleValued are the names of the single-valued fields: limit,
// remaining, reset.
var singleValued = [...]struct {
	which Headers
	names [3]string
}{
	{XRateLimitHeaders, [3]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}},
	{DraftHeaders, [3]string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}},
}

// Quota returns how the headers report it's status st (Over when its Code
// refuses: a shadow-mode or quota-mode violation is reported with its
// remaining and reset, but never described as the refusal): named by the rule's
// name or else its configuration path; q and w are the limit's requests
// per unit and unit (the burst, and the seconds to refill it, for a token
// bucket).
func (it *item) Quota(st *Status) Quota {
	l := &it.Rule.Limit
	q := Quota{Name: l.Name, Limit: int64(l.Capacity()), Window: l.Unit.Seconds(),
		Remaining: int64(st.Remaining), Full: Seconds(st.ResetAfter), Over: st.Code == OverLimit}
	if q.Name == "" {
		q.Name = it.Rule.Path
	}
	if l.Algorithm == TokenBucket && l.RequestsPerUnit > 0 {
		// seconds to refill the burst from empty, rounded up
		q.Window = max(ceilDiv(q.Limit*l.Unit.Seconds(), int64(l.RequestsPerUnit)), 1)
	}
	switch {
	case st.Over:
		q.Reset = Seconds(st.RetryAfter)
	case q.Remaining >= q.Limit:
		q.Reset = 0
	default:
		q.Reset = q.Full
	}
	return q
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// responseHeaders returns the fields which selects for a planned request
// and its statuses (one per item): a quota per limited item (see
// item.Quota), and with RetryAfterHeader Retry-After, the longest of the
// refusing descriptors' waits, when the request is refused.
func responseHeaders(items []item, statuses []Status, which Headers) []Header {
	var buf [4]Quota
	qs := buf[:0]
	var retry int64
	for i := range items {
		if items[i].Kind != limited {
			continue
		}
		qs = append(qs, items[i].Quota(&statuses[i]))
		if statuses[i].Code == OverLimit && which&RetryAfterHeader != 0 {
			if s, ok := RetryAfter(statuses[i].RetryAfter); ok && s > retry {
				retry = s
			}
		}
	}
	out := AppendHeaders(nil, qs, which)
	if retry > 0 {
		out = append(out, Header{"retry-after", strconv.FormatInt(retry, 10)})
	}
	return out
}
