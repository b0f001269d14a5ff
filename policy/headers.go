package policy

import (
	"strconv"

	"github.com/bucketgrid/bucketgrid/internal/header"
)

// Headers selects the rate-limit header fields a front door writes.
type Headers uint8

const (
	// IETFHeaders writes RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers, -08 and later) as RFC 9651
	// structured-field lists with one item per limit.
	IETFHeaders = Headers(header.IETF)
	// XRateLimitHeaders writes the de facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset of the described limit
	// (the last refusing one, else the one with the fewest remaining).
	XRateLimitHeaders = Headers(header.XRateLimit)
	// DraftHeaders writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset of the described limit: the names of the draft's
	// early versions, which envoyproxy/ratelimit writes
	// (LIMIT_RESPONSE_HEADERS_ENABLED) and a drop-in's clients may parse.
	DraftHeaders = Headers(header.Draft)
	// RetryAfterHeader writes Retry-After on a refusal: the longest of
	// the refusing limits' waits, in whole seconds rounded up, at least 1.
	// envoyproxy/ratelimit never sends it.
	RetryAfterHeader = Headers(header.Draft << 1)
)

// Header is one header field; Name is lower case, as HTTP/2 requires.
type Header struct {
	Name, Value string
}

// Quota returns how the headers report it's status st (Over when its Code
// refuses: a shadow-mode or quota-mode violation is reported with its
// remaining and reset, but never described as the refusal): named by the rule's
// name or else its configuration path; q and w are the limit's requests
// per unit and unit (the burst, and the seconds to refill it, for a token
// bucket).
func (it *item) Quota(st *Status) header.Quota {
	l := &it.Rule.Limit
	q := header.Quota{Name: l.Name, Limit: int64(l.capacity()), Window: l.Unit.seconds(),
		Remaining: int64(st.Remaining), Full: header.Seconds(st.ResetAfter), Over: st.Code == OverLimit}
	if q.Name == "" {
		q.Name = it.Rule.Path
	}
	if l.Algorithm == TokenBucket && l.RequestsPerUnit > 0 {
		// seconds to refill the burst from empty, rounded up
		q.Window = max(ceilDiv(q.Limit*l.Unit.seconds(), int64(l.RequestsPerUnit)), 1)
	}
	switch {
	case st.Over:
		q.Reset = header.Seconds(st.retryAfter)
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
	var buf [4]header.Quota
	qs := buf[:0]
	var retry int64
	for i := range items {
		if items[i].Kind != limited {
			continue
		}
		qs = append(qs, items[i].Quota(&statuses[i]))
		if statuses[i].Code == OverLimit && which&RetryAfterHeader != 0 {
			if s, ok := header.RetryAfter(statuses[i].retryAfter); ok && s > retry {
				retry = s
			}
		}
	}
	out := header.Append([]Header(nil), qs, header.Set(which))
	if retry > 0 {
		out = append(out, Header{"retry-after", strconv.FormatInt(retry, 10)})
	}
	return out
}
