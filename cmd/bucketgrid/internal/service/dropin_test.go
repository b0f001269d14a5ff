package service

import (
	"context"
	"maps"
	"slices"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

const dropinYAML = `
domain: d
descriptors:
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: counted
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func newDropin(t *testing.T, opts Options) *Service {
	t.Helper()
	s := newService(t, opts)
	cfg, err := rulefile.Load([]rulefile.File{{Name: "d.yaml", Data: []byte(dropinYAML)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(cfg)
	return s
}

// remaining sends r and returns each descriptor's code and limit_remaining.
func remaining(t *testing.T, s *Service, r *rlspb.RateLimitRequest) ([]rlspb.RateLimitResponse_Code, []uint32) {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	var codes []rlspb.RateLimitResponse_Code
	var rem []uint32
	for _, st := range resp.Statuses {
		codes = append(codes, st.Code)
		rem = append(rem, st.LimitRemaining)
	}
	return codes, rem
}

// TestStopCountingWhenOverLimit is envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (its Redis cache, DoLimit): when
// one descriptor of a request would go over its limit, only the descriptors
// that would go over are counted; the others are not charged and answer
// what their count is.
func TestStopCountingWhenOverLimit(t *testing.T) {
	over, ok := rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OK
	t.Run("blocked", func(t *testing.T) {
		s := newDropin(t, Options{StopCountingWhenOverLimit: true})
		for i := range 5 {
			codes, rem := remaining(t, s, req("d", "blocked", "x", "counted", "y"))
			if codes[0] != over || codes[1] != ok || rem[1] != 10 {
				t.Fatalf("request %d: %v %v, want OVER_LIMIT and OK with 10 remaining", i, codes, rem)
			}
		}
		if _, rem := remaining(t, s, req("d", "counted", "y")); rem[0] != 9 {
			t.Fatalf("counted alone after the refusals: %d remaining, want 9 (nothing counted before)", rem[0])
		}
	})
	t.Run("default counts every descriptor", func(t *testing.T) {
		s := newDropin(t, Options{})
		for i := range 3 {
			if _, rem := remaining(t, s, req("d", "blocked", "x", "counted", "y")); rem[1] != uint32(9-i) {
				t.Fatalf("request %d: %d remaining, want %d (envoyproxy/ratelimit's default)", i, rem[1], 9-i)
			}
		}
	})
	t.Run("within the limit every descriptor counts", func(t *testing.T) {
		s := newDropin(t, Options{StopCountingWhenOverLimit: true})
		want := [][]uint32{{1, 9}, {0, 8}, {0, 8}, {0, 8}}
		for i, w := range want {
			codes, rem := remaining(t, s, req("d", "small", "x", "counted", "y"))
			if !slices.Equal(rem, w) || (i < 2) != (codes[0] == ok) {
				t.Fatalf("request %d: %v %v, want remaining %v", i, codes, rem, w)
			}
		}
		// the descriptor going over is counted: small's count is 4 now,
		// so a check of 0 hits is over
		r := req("d", "small", "x")
		r.HitsAddend = 0
		r.Descriptors[0].HitsAddend = nil
		if codes, _ := remaining(t, s, r); codes[0] != over {
			t.Fatalf("small after going over: %v", codes)
		}
	})
}

// TestHeadersAsEnvoyRatelimit: draft headers are envoyproxy/ratelimit's
// three, Retry-After only when asked, names as LIMIT_*_HEADER set them.
func TestHeadersAsEnvoyRatelimit(t *testing.T) {
	refuse := func(s *Service) map[string]string {
		t.Helper()
		var h map[string]string
		for range 3 {
			r, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "z"))
			if err != nil {
				t.Fatal(err)
			}
			h = headerMap(r.ResponseHeadersToAdd)
		}
		return h
	}
	h := refuse(newService(t, Options{Headers: policy.DraftHeaders}))
	if got, want := slices.Sorted(maps.Keys(h)), []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}; !slices.Equal(got, want) {
		t.Errorf("draft headers of a refusal: %v, want %v", h, want)
	}
	h = refuse(newService(t, Options{Headers: policy.DraftHeaders, RetryAfter: true}))
	if h["retry-after"] != "15" {
		t.Errorf("retry-after asked for: %v", h)
	}
	h = refuse(newService(t, Options{RetryAfter: true}))
	if len(h) != 1 || h["retry-after"] != "15" {
		t.Errorf("retry-after alone: %v", h)
	}
	h = refuse(newService(t, Options{Headers: policy.DraftHeaders,
		HeaderNames: map[string]string{"ratelimit-limit": "x-l", "ratelimit-remaining": "x-r", "ratelimit-reset": "x-s"}}))
	if len(h) != 3 || h["x-l"] != "2" || h["x-r"] != "0" || h["x-s"] != "15" {
		t.Errorf("renamed draft headers: %v", h)
	}
}

// TestStopCountingZeroHitsOverLimit: a descriptor of 0 hits already over
// its limit stops the others being counted, as envoyproxy/ratelimit's
// check (count + 0 > limit) finds it over.
func TestStopCountingZeroHitsOverLimit(t *testing.T) {
	s := newDropin(t, Options{StopCountingWhenOverLimit: true})
	for range 3 {
		remaining(t, s, req("d", "small", "x"))
	}
	r := req("d", "small", "x", "counted", "y")
	zero := uint64(0)
	r.Descriptors[0].HitsAddend = wrapperspb.UInt64(zero)
	for i := range 3 {
		if codes, rem := remaining(t, s, r); codes[0] != rlspb.RateLimitResponse_OVER_LIMIT || rem[1] != 10 {
			t.Fatalf("request %d: %v %v, want small over and counted at 10", i, codes, rem)
		}
	}
}
