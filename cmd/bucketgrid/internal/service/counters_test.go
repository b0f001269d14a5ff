package service

import (
	"context"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// check sends one request and returns the status of its first descriptor.
func check(t *testing.T, s *Service, in *rlspb.RateLimitRequest) *rlspb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	r, err := s.ShouldRateLimit(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return r.Statuses[0]
}

func reload(t *testing.T, s *Service, yaml string) {
	t.Helper()
	cfg, err := rulefile.Load([]rulefile.File{{Name: "shop.yaml", Data: []byte(yaml)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(cfg)
}

// TestOverrideSharesTheCounter: Envoy's per-descriptor limit override
// counts in the configured rule's counter, as envoyproxy/ratelimit counts
// it, so routes with different overrides for one descriptor cannot admit
// more than any of their limits.
func TestOverrideSharesTheCounter(t *testing.T) {
	s := newService(t, Options{})
	for range 2 {
		check(t, s, req("shop", "client", "o")) // the rule: 2 a minute
	}
	over := req("shop", "client", "o")
	over.Descriptors[0].Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
	if st := check(t, s, over); st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != 2 {
		t.Fatalf("override of 5 after 2 hits: %v, want OK with 2 remaining", st)
	}
	if st := check(t, s, req("shop", "client", "o")); st.Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the rule after 3 hits: %v, want over its 2", st)
	}
}

// TestReloadKeepsCounters: a reload that changes a limit resets no one:
// the hits counted before it count against the new limit, in a fixed
// window and (consumed tokens inherited) in a token bucket.
func TestReloadKeepsCounters(t *testing.T) {
	s := newService(t, Options{})
	for range 2 {
		check(t, s, req("shop", "client", "r"))
		check(t, s, req("shop", "api", "r")) // burst 3
	}
	reload(t, s, strings.NewReplacer("requests_per_unit: 2}", "requests_per_unit: 4}", "burst: 3", "burst: 6").Replace(shopYAML))
	if st := check(t, s, req("shop", "client", "r")); st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != 1 {
		t.Fatalf("window after reload to 4: %v, want OK with 1 remaining (3 counted)", st)
	}
	if st := check(t, s, req("shop", "api", "r")); st.Code != rlspb.RateLimitResponse_OK || st.LimitRemaining != 3 {
		t.Fatalf("token bucket after reload to a burst of 6: %v, want 3 remaining (2+1 consumed)", st)
	}
	reload(t, s, shopYAML)
	if st := check(t, s, req("shop", "client", "r")); st.Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("window after reload back to 2: %v, want over (4 counted)", st)
	}
}

// TestHeadersDescribeTheLastRefusal: with several descriptors over the
// limit, the single-valued headers describe the last, as
// envoyproxy/ratelimit's do; DraftHeaders writes them under its names.
func TestHeadersDescribeTheLastRefusal(t *testing.T) {
	s := newService(t, Options{Headers: policy.XRateLimitHeaders | policy.DraftHeaders})
	var last *rlspb.RateLimitResponse
	for range 4 { // client (2 a minute) refuses the 3rd, api (burst 3) the 4th
		r, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "h", "api", "h"))
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	if last.Statuses[0].Code != rlspb.RateLimitResponse_OVER_LIMIT || last.Statuses[1].Code != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("statuses %v, want both over", last.Statuses)
	}
	h := headerMap(last.ResponseHeadersToAdd)
	for k, v := range map[string]string{
		"x-ratelimit-limit": "3", "x-ratelimit-remaining": "0",
		"ratelimit-limit": "3", "ratelimit-remaining": "0", "ratelimit-reset": "36",
	} {
		if h[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
	if _, ok := h["ratelimit-policy"]; ok {
		t.Errorf("IETF fields without IETFHeaders: %v", h)
	}
}
