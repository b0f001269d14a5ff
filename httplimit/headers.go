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
	"github.com/bucketgrid/bucketgrid/internal/header"
	"github.com/bucketgrid/bucketgrid/policy"
)

// Canonical forms, so that Header.Get finds them and no canonicalisation is
// paid per request.
const (
	hPolicy      = "Ratelimit-Policy"
	hRateLimit   = "Ratelimit"
	hRetryAfter  = "Retry-After"
	hContentType = "Content-Type"
	hCache       = "Cache-Control"
	hNoSniff     = "X-Content-Type-Options"
)

// windowSeconds is the w of a bandwidth's policy item: the seconds an empty
// bandwidth takes to refill to capacity (core's FillTime), rounded up as
// package policy rounds every wait, at least 1. For the classic limit of n
// tokens per period, refilled n at a time, that is the period. A bandwidth
// that never fills (math.MaxInt64) gets the largest value a field holds.
func windowSeconds(bw *core.Bandwidth) int64 {
	ns := bw.FillTime()
	if ns == math.MaxInt64 {
		return math.MaxInt64 // clamped to the largest RFC 9651 Integer
	}
	return max(header.Seconds(time.Duration(ns)), 1)
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

// policyField returns the RateLimit-Policy field value of cfg: one item per
// bandwidth, "name";q=capacity;w=seconds to refill from empty to full.
func policyField(cfg core.Config) string {
	var buf [256]byte
	return string(appendPolicy(buf[:0], cfg.Bandwidths))
}

// appendPolicy appends the RateLimit-Policy value of bws, rendered by
// package policy as every front door renders it.
func appendPolicy(b []byte, bws []core.Bandwidth) []byte {
	var buf [4]header.Quota
	qs := buf[:0]
	for i := range bws {
		qs = append(qs, header.Quota{Name: policyName(bws, i), Limit: bws[i].Capacity, Window: windowSeconds(&bws[i])})
	}
	return header.AppendPolicy(b, qs)
}

// rateLimitField returns the RateLimit field value of u for a request of
// cost tokens: one item per bandwidth, "name";r=remaining;t=seconds. See the
// package documentation for exactly what r and t say.
func rateLimitField(u Usage, cost int64) string {
	var buf [256]byte
	return string(appendRateLimit(buf[:0], &u, cost))
}

// appendRateLimit appends the RateLimit value of u, rendered by package
// policy (a t below 0, "never", is left out).
func appendRateLimit(b []byte, u *Usage, cost int64) []byte {
	bws := u.Config.Bandwidths
	var buf [4]header.Quota
	qs := buf[:0]
	for i := range bws {
		r, t := itemValues(u, i, cost)
		qs = append(qs, header.Quota{Name: policyName(bws, i), Remaining: r, Reset: t})
	}
	return header.AppendRateLimit(b, qs)
}

// itemValues returns r and t of bandwidth i, t rounded up by package
// policy; t < 0 means "never" (the cost exceeds a capacity) and is left out.
func itemValues(u *Usage, i int, cost int64) (r, t int64) {
	if u.Bands != nil {
		return u.Bands[i].Available, header.Seconds(u.Bands[i].Wait)
	}
	// Only the minimum is known: a lower bound of every bandwidth's tokens,
	// exact for the tightest; the waits are upper bounds.
	p := &u.Probe
	switch {
	case !p.Consumed:
		return p.Remaining, header.Seconds(p.WaitForRefill)
	case len(u.Config.Bandwidths) == 1 && p.Remaining >= u.Config.Bandwidths[0].Capacity:
		return p.Remaining, 0
	}
	return p.Remaining, header.Seconds(p.WaitForReset)
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

// canonical are the canonical forms of the fields package policy names in
// lower case, so that Header.Get finds them and no canonicalisation is paid
// per request.
var canonical = map[string]string{
	"x-ratelimit-limit": "X-Ratelimit-Limit", "x-ratelimit-remaining": "X-Ratelimit-Remaining",
	"x-ratelimit-reset": "X-Ratelimit-Reset", "ratelimit-limit": "Ratelimit-Limit",
	"ratelimit-remaining": "Ratelimit-Remaining", "ratelimit-reset": "Ratelimit-Reset",
}

// writeHeaders sets the rate-limit fields of u on h, as package policy
// renders them. policyValue is the RateLimit-Policy value, cached by the
// caller.
func writeHeaders(h http.Header, u *Usage, cost int64, which policy.Headers, policyValue string) {
	bws := u.Config.Bandwidths
	if len(bws) == 0 {
		return
	}
	if which&policy.IETFHeaders != 0 {
		var buf [256]byte
		vals := make([]string, 2) // one allocation for both fields
		vals[0], vals[1] = policyValue, string(appendRateLimit(buf[:0], u, cost))
		h[hPolicy], h[hRateLimit] = vals[0:1:1], vals[1:2:2]
	}
	single := which & (policy.XRateLimitHeaders | policy.DraftHeaders)
	if single == 0 {
		return
	}
	// the tightest bandwidth, and the seconds until the whole bucket is full
	i := tightest(u)
	q := [1]header.Quota{{Limit: bws[i].Capacity, Remaining: u.Probe.Remaining, Full: header.Seconds(u.Probe.WaitForReset)}}
	if u.Bands != nil {
		q[0].Remaining = u.Bands[i].Available
	}
	var buf [6]policy.Header
	fields := header.Append(buf[:0], q[:], header.Set(single))
	vals := make([]string, len(fields)) // one allocation for all
	for j, f := range fields {
		vals[j] = f.Value
		h[canonical[f.Name]] = vals[j : j+1 : j+1]
	}
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
