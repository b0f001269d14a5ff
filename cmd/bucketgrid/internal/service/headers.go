package service

import (
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/bucketgrid/bucketgrid/httplimit"
	"github.com/bucketgrid/bucketgrid/rlsconfig"
)

// usage describes a counted descriptor the way httplimit's headers read a
// bucket: the rule's policy as the configuration, its status as the probe.
func usage(it *rlsconfig.Item, st *rlsconfig.Status) httplimit.Usage {
	return httplimit.Usage{
		Probe: core.Probe{Consumed: !st.Over, Remaining: int64(st.Remaining),
			WaitForRefill: st.RetryAfter, WaitForReset: st.ResetAfter},
		Config: core.Config{Bandwidths: []core.Bandwidth{it.Rule.Policy()}},
	}
}

// headers returns the response_headers_to_add: RateLimit-Policy and
// RateLimit with one item per counted descriptor, X-RateLimit-* of the
// tightest one (the first refused, else the fewest remaining), and
// Retry-After when the request is refused. Names are lower case, as HTTP/2
// requires.
func headers(items []rlsconfig.Item, statuses []rlsconfig.Status, which httplimit.Headers) []*corev3.HeaderValue {
	var policy, limit []string
	tightest := -1
	var retry int64
	for i := range items {
		if items[i].Kind != rlsconfig.Limited {
			continue
		}
		st := &statuses[i]
		u := usage(&items[i], st)
		if which&httplimit.IETFHeaders != 0 {
			h := http.Header{}
			httplimit.SetHeaders(h, u, int64(max(items[i].Hits, 1)), httplimit.IETFHeaders)
			policy = append(policy, h.Get("RateLimit-Policy"))
			limit = append(limit, h.Get("RateLimit"))
		}
		if tightest < 0 || (st.Over && !statuses[tightest].Over) ||
			(st.Over == statuses[tightest].Over && st.Remaining < statuses[tightest].Remaining) {
			tightest = i
		}
		if st.Code == rlsconfig.OverLimit {
			if s, ok := httplimit.RetryAfterSeconds(u.Probe); ok && s > retry {
				retry = s
			}
		}
	}
	var out []*corev3.HeaderValue
	add := func(k, v string) { out = append(out, &corev3.HeaderValue{Key: k, Value: v}) }
	if len(policy) > 0 {
		add("ratelimit-policy", strings.Join(policy, ", "))
		add("ratelimit", strings.Join(limit, ", "))
	}
	if which&httplimit.XRateLimitHeaders != 0 && tightest >= 0 {
		h := http.Header{}
		httplimit.SetHeaders(h, usage(&items[tightest], &statuses[tightest]), int64(max(items[tightest].Hits, 1)), httplimit.XRateLimitHeaders)
		for _, k := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
			add(strings.ToLower(k), h.Get(k))
		}
	}
	if retry > 0 {
		add("retry-after", strconv.FormatInt(retry, 10))
	}
	return out
}
