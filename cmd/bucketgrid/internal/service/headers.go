package service

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bucketgrid/bucketgrid/policy"
)

// headers returns the response_headers_to_add of a decision's fields, as
// package policy renders them, names as Options.HeaderNames renames them.
func (s *Service) headers(hs []policy.Header) []*corev3.HeaderValue {
	out := make([]*corev3.HeaderValue, 0, len(hs))
	vals := make([]corev3.HeaderValue, len(hs)) // one allocation for all
	for i, h := range hs {
		name := h.Name
		if n, ok := s.opts.HeaderNames[name]; ok {
			name = n
		}
		vals[i] = corev3.HeaderValue{Key: name, Value: h.Value}
		out = append(out, &vals[i])
	}
	return out
}
