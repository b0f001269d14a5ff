package httplimit

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Headers selects the rate-limit header fields the middleware writes.
type Headers uint8

const (
	// IETFHeaders writes RateLimit-Policy and RateLimit
	// (draft-ietf-httpapi-ratelimit-headers, -08 and later) as RFC 9651
	// structured-field lists with one item per bandwidth.
	IETFHeaders Headers = 1 << iota
	// XRateLimitHeaders writes the de facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset for the tightest bandwidth.
	XRateLimitHeaders
)

// Canonical forms, so that Header.Get finds them and no canonicalisation is
// paid per request.
const (
	hPolicy      = "Ratelimit-Policy"
	hRateLimit   = "Ratelimit"
	hXLimit      = "X-Ratelimit-Limit"
	hXRemaining  = "X-Ratelimit-Remaining"
	hXReset      = "X-Ratelimit-Reset"
	hRetryAfter  = "Retry-After"
	hContentType = "Content-Type"
	hCache       = "Cache-Control"
	hNoSniff     = "X-Content-Type-Options"
)

// maxSFInteger is the largest RFC 9651 Integer (15 digits).
const maxSFInteger = 999_999_999_999_999

func clampSF(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// ceilSeconds returns d in whole seconds, rounded up, so a client waiting
// that long never comes back before the time has passed; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// windowSeconds is the w of a bandwidth's policy item: the seconds an empty
// bandwidth takes to refill to capacity (core's FillTime), rounded up, at
// least 1. For the classic limit of n tokens per period, refilled n at a
// time, that is the period.
func windowSeconds(bw *core.Bandwidth) int64 {
	ns := bw.FillTime()
	if ns == math.MaxInt64 {
		return maxSFInteger
	}
	return min(max(ceilSeconds(time.Duration(ns)), 1), maxSFInteger)
}

// policyName is the identifier of bandwidth i: its ID, or "default" for the
// only bandwidth of a configuration, or its index.
func policyName(bws []core.Bandwidth, i int) string {
	if id := bws[i].ID; id != "" {
		return id
	}
	if len(bws) == 1 {
		return "default"
	}
	return strconv.Itoa(i)
}

// PolicyField returns the RateLimit-Policy field value of cfg: one item per
// bandwidth, "name";q=capacity;w=seconds to refill from empty to full.
func PolicyField(cfg core.Config) string {
	var buf [256]byte
	return string(appendPolicy(buf[:0], cfg.Bandwidths))
}

// appendPolicy appends the RateLimit-Policy value of bws, rendered by
// package policy as every front door renders it.
func appendPolicy(b []byte, bws []core.Bandwidth) []byte {
	var buf [4]policy.Quota
	qs := buf[:0]
	for i := range bws {
		qs = append(qs, policy.Quota{Name: policyName(bws, i), Limit: bws[i].Capacity, Window: windowSeconds(&bws[i])})
	}
	return policy.AppendPolicyField(b, qs)
}

// RateLimitField returns the RateLimit field value of u for a request of
// cost tokens: one item per bandwidth, "name";r=remaining;t=seconds. See the
// package documentation for exactly what r and t say.
func RateLimitField(u Usage, cost int64) string {
	var buf [256]byte
	return string(appendRateLimit(buf[:0], &u, cost))
}

// appendRateLimit appends the RateLimit value of u, rendered by package
// policy (a t below 0, "never", is left out).
func appendRateLimit(b []byte, u *Usage, cost int64) []byte {
	bws := u.Config.Bandwidths
	var buf [4]policy.Quota
	qs := buf[:0]
	for i := range bws {
		r, t := itemValues(u, i, cost)
		qs = append(qs, policy.Quota{Name: policyName(bws, i), Remaining: r, Reset: t})
	}
	return policy.AppendRateLimitField(b, qs)
}

// itemValues returns r and t of bandwidth i; t < 0 means "never" (the cost
// exceeds a capacity) and is left out.
func itemValues(u *Usage, i int, cost int64) (r, t int64) {
	if u.Bands != nil {
		bd := u.Bands[i]
		if bd.Wait == math.MaxInt64 {
			return bd.Available, -1
		}
		return bd.Available, ceilSeconds(bd.Wait)
	}
	// Only the minimum is known: a lower bound of every bandwidth's tokens,
	// exact for the tightest; the waits are upper bounds.
	p := &u.Probe
	switch {
	case !p.Consumed && p.WaitForRefill == math.MaxInt64:
		return p.Remaining, -1
	case !p.Consumed:
		return p.Remaining, ceilSeconds(p.WaitForRefill)
	case len(u.Config.Bandwidths) == 1 && p.Remaining >= u.Config.Bandwidths[0].Capacity:
		return p.Remaining, 0
	}
	return p.Remaining, ceilSeconds(p.WaitForReset)
}

// tightest returns the index of the bandwidth closest to refusing: the
// fewest tokens (known per bandwidth) or else the smallest capacity.
func tightest(u *Usage) int {
	bws := u.Config.Bandwidths
	best := 0
	for i := 1; i < len(bws); i++ {
		if u.Bands != nil {
			a, b := u.Bands[i].Available, u.Bands[best].Available
			if a < b || (a == b && bws[i].Capacity < bws[best].Capacity) {
				best = i
			}
		} else if bws[i].Capacity < bws[best].Capacity {
			best = i
		}
	}
	return best
}

// fired returns the names of the bandwidths that refused a request of cost
// tokens; nil when that is not known.
func fired(u *Usage, cost int64) []string {
	bws := u.Config.Bandwidths
	switch {
	case len(bws) == 0:
		return nil
	case u.Bands != nil:
		var names []string
		for i := range bws {
			if u.Bands[i].Available < cost {
				names = append(names, policyName(bws, i))
			}
		}
		return names
	case len(bws) == 1:
		return []string{policyName(bws, 0)}
	}
	return nil
}

// writeHeaders sets the rate-limit fields of u on h. policyValue is the
// RateLimit-Policy value, cached by the caller.
func writeHeaders(h http.Header, u *Usage, cost int64, which Headers, policyValue string) {
	bws := u.Config.Bandwidths
	if len(bws) == 0 {
		return
	}
	if which&IETFHeaders != 0 {
		var buf [256]byte
		vals := make([]string, 2) // one allocation for both fields
		vals[0], vals[1] = policyValue, string(appendRateLimit(buf[:0], u, cost))
		h[hPolicy], h[hRateLimit] = vals[0:1:1], vals[1:2:2]
	}
	if which&XRateLimitHeaders != 0 {
		i := tightest(u)
		rem := u.Probe.Remaining
		if u.Bands != nil {
			rem = u.Bands[i].Available
		}
		vals := make([]string, 3)
		vals[0] = strconv.FormatInt(clampSF(bws[i].Capacity), 10)
		vals[1] = strconv.FormatInt(clampSF(rem), 10)
		vals[2] = strconv.FormatInt(clampSF(ceilSeconds(u.Probe.WaitForReset)), 10)
		h[hXLimit], h[hXRemaining], h[hXReset] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	}
}

// SetHeaders sets on h the rate-limit fields the middleware would write for
// u, the outcome of taking cost tokens: which selects IETFHeaders and
// XRateLimitHeaders, formatted exactly as the middleware formats them (see
// the package documentation). It sets no Retry-After (RetryAfterSeconds
// computes that). It lets a service answering for a proxy, such as an Envoy
// rate-limit service, give clients the same fields.
func SetHeaders(h http.Header, u Usage, cost int64, which Headers) {
	writeHeaders(h, &u, cost, which, PolicyField(u.Config))
}

// policyCache remembers the RateLimit-Policy values of the last few
// configurations seen, so that the usual handful of plans costs no
// formatting per request. It is safe for concurrent use.
type policyCache struct {
	p atomic.Pointer[[]policyEntry]
}

type policyEntry struct {
	bws   []core.Bandwidth // a private copy
	value string
}

const policyCacheSize = 8

func (c *policyCache) get(bws []core.Bandwidth) string {
	var old []policyEntry
	if p := c.p.Load(); p != nil {
		old = *p
		for i := range old {
			if slices.Equal(old[i].bws, bws) {
				return old[i].value
			}
		}
	}
	var buf [256]byte
	e := policyEntry{bws: slices.Clone(bws), value: string(appendPolicy(buf[:0], bws))}
	next := make([]policyEntry, 0, policyCacheSize)
	next = append(next, e)
	next = append(next, old[:min(len(old), policyCacheSize-1)]...)
	c.p.Store(&next)
	return e.value
}

// RetryAfterSeconds returns the Retry-After delay-seconds for a refused
// probe: its WaitForRefill rounded up to whole seconds, at least 1,
// so it never points before the refill. ok is false when the request can
// never succeed (its cost exceeds a capacity).
func RetryAfterSeconds(p core.Probe) (secs int64, ok bool) {
	if p.WaitForRefill == math.MaxInt64 {
		return 0, false
	}
	return min(max(ceilSeconds(p.WaitForRefill), 1), maxSFInteger), true
}

// Problem is an RFC 9457 problem details object, the body of the
// middleware's 429, 503 and 400 responses.
type Problem struct {
	// Type is a URI naming the problem type; "about:blank" by default.
	Type string `json:"type"`
	// Title is the status text ("Too Many Requests").
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence in words.
	Detail string `json:"detail,omitempty"`
	// Policies names the limits that refused the request (429 only), as in
	// RateLimit-Policy.
	Policies []string `json:"policies,omitempty"`
	// RetryAfter repeats the Retry-After field in seconds (429 only).
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// writeProblem writes p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and integers only
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	h := w.Header()
	h[hContentType] = []string{"application/problem+json"}
	h[hNoSniff] = []string{"nosniff"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(p.Status)
	w.Write(body)
}
