package service

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/bucketgrid/bucketgrid/policy"
)

// headers returns the response_headers_to_add of a request's items and
// statuses, as package policy renders them.
func headers(items []policy.Item, statuses []policy.Status, which policy.Headers) []*corev3.HeaderValue {
	hs := policy.ResponseHeaders(items, statuses, which)
	out := make([]*corev3.HeaderValue, len(hs))
	vals := make([]corev3.HeaderValue, len(hs)) // one allocation for all
	for i, h := range hs {
		vals[i] = corev3.HeaderValue{Key: h.Name, Value: h.Value}
		out[i] = &vals[i]
	}
	return out
}
