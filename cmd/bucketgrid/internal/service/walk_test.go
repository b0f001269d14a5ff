package service

import (
	"context"
	"os"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestWalkProbe answers one ShouldRateLimit in-process on the memory
// backend, the bucket absent (the longer walk: the Manager fetches the
// configuration). internal/layers' TestWalk runs it with every function of
// the workspace instrumented and judges the path it records.
func TestWalkProbe(t *testing.T) {
	s := newService(t, Options{})
	resp, err := walkRequest(s, req("shop", "client", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("first request answered %v, want OK", resp.GetOverallCode())
	}
}

// walkRequest is the request internal/layers' TestWalk records: with
// BUCKETGRID_WALK_OUT set, the instrumented functions append their stacks
// to that file while it runs.
func walkRequest(s *Service, in *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if out := os.Getenv("BUCKETGRID_WALK_OUT"); out != "" {
		os.Setenv("BUCKETGRID_WALK_FILE", out)
		defer os.Unsetenv("BUCKETGRID_WALK_FILE")
	}
	return s.ShouldRateLimit(context.Background(), in)
}
