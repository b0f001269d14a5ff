package service

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bucketgrid/bucketgrid/policy"
)

// headers returns the response_headers_to_add of a request's items and
// statuses, as package policy renders them: Retry-After only with
// Options.RetryAfter, names as Options.HeaderNames renames them.
func (s *Service) headers(items []policy.Item, statuses []policy.Status) []*corev3.HeaderValue {
	hs := policy.ResponseHeaders(items, statuses, s.opts.Headers)
	out := make([]*corev3.HeaderValue, 0, len(hs))
	vals := make([]corev3.HeaderValue, len(hs)) // one allocation for all
	for i, h := range hs {
		if h.Name == "retry-after" && !s.opts.RetryAfter {
			continue
		}
		name := h.Name
		if n, ok := s.opts.HeaderNames[name]; ok {
			name = n
		}
		vals[i] = corev3.HeaderValue{Key: name, Value: h.Value}
		out = append(out, &vals[i])
	}
	return out
}
