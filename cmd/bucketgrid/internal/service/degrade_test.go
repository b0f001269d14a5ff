package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/clock"
	"github.com/bucketgrid/bucketgrid/core/wire"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// downExecutor is a backend that is out: every call fails as an outage.
type downExecutor struct{}

func (downExecutor) Execute(context.Context, string, wire.Request) (wire.Response, error) {
	return wire.Response{}, errDown
}

func (downExecutor) Remove(context.Context, string) error { return errDown }

var errDown = errors.New("backend down")

const windowYAML = `
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestDegradedFixedWindowShare runs a fixed-window rule of 5 a minute on a
// service whose backend is out, degraded for 2 instances: the instance
// admits its share, ⌈5/2⌉ = 3, then refuses until the window ends, and
// current_limit, limit_remaining, duration_until_reset and the headers
// describe the share.
func TestDegradedFixedWindowShare(t *testing.T) {
	instances := 2
	c := clock.NewFake(fixedNow)
	m := bucketgrid.NewManager(downExecutor{}, bucketgrid.WithClock(c),
		bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return instances }}))
	cfg, err := rulefile.Load([]rulefile.File{{Name: "shop.yaml", Data: []byte(windowYAML)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Manager: m, Clock: c, Headers: policy.XRateLimitHeaders})
	s.SetConfig(cfg)
	const share = 3
	for i := range share + 2 {
		r, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "a"))
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		want := rlspb.RateLimitResponse_OK
		if i >= share {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		st := r.Statuses[0]
		limit := ""
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "x-ratelimit-limit" {
				limit = h.Value
			}
		}
		if r.OverallCode != want || st.CurrentLimit.GetRequestsPerUnit() != share || limit != "3" {
			t.Errorf("request %d: %v, current_limit %d, limit_remaining %d, x-ratelimit-limit %q; want %v of a share of %d",
				i+1, r.OverallCode, st.CurrentLimit.GetRequestsPerUnit(), st.LimitRemaining, limit, want, share)
		}
		if want == rlspb.RateLimitResponse_OK && st.LimitRemaining != uint32(share-i-1) {
			t.Errorf("request %d: limit_remaining %d, want %d", i+1, st.LimitRemaining, share-i-1)
		}
		// fixedNow is 15 s before the minute's end
		if got := st.DurationUntilReset.AsDuration(); got != 15*time.Second {
			t.Errorf("request %d: duration_until_reset %v, want 15s", i+1, got)
		}
	}
	c.Advance(15 * time.Second) // the next window: a full share again
	if r, err := s.ShouldRateLimit(context.Background(), req("shop", "client", "a")); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
		t.Errorf("first request of the next window: %v, %v; want OK", r.GetOverallCode(), err)
	}
}

const bucketYAML = `
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: token_bucket}
`

// TestDegradedTokenBucketZeroHits asks a degraded token bucket of 6 a
// minute, shared by 2 instances (3 a minute each), how it stands without
// taking anything (hits_addend 0), first full and then after one hit: the
// answer describes the share, OK with its remaining hits, and the reset is
// the time the share takes to refill, never an overflowed duration.
func TestDegradedTokenBucketZeroHits(t *testing.T) {
	c := clock.NewFake(fixedNow)
	m := bucketgrid.NewManager(downExecutor{}, bucketgrid.WithClock(c),
		bucketgrid.WithDegrade(bucketgrid.Degrade{Instances: func() int { return 2 }}))
	cfg, err := rulefile.Load([]rulefile.File{{Name: "shop.yaml", Data: []byte(bucketYAML)}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Manager: m, Clock: c, Headers: policy.XRateLimitHeaders})
	s.SetConfig(cfg)
	check := func(hits uint64) *rlspb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		r := req("shop", "client", "a")
		r.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		resp, err := s.ShouldRateLimit(context.Background(), r)
		if err != nil {
			t.Fatalf("%d hits: %v", hits, err)
		}
		st := resp.Statuses[0]
		if resp.OverallCode != rlspb.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 3 {
			t.Fatalf("%d hits: %v, current_limit %d; want OK of a share of 3", hits, resp.OverallCode,
				st.CurrentLimit.GetRequestsPerUnit())
		}
		return st
	}
	for _, tt := range []struct {
		hits      uint64
		remaining uint32
		reset     time.Duration
	}{
		{0, 3, 0},                // full: nothing to refill
		{1, 2, 20 * time.Second}, // one of 3 a minute taken
		{0, 2, 20 * time.Second}, // asked again without taking
	} {
		st := check(tt.hits)
		if st.LimitRemaining != tt.remaining || st.DurationUntilReset.AsDuration() != tt.reset {
			t.Errorf("%d hits: limit_remaining %d, duration_until_reset %v; want %d, %v", tt.hits,
				st.LimitRemaining, st.DurationUntilReset.AsDuration(), tt.remaining, tt.reset)
		}
	}
}
