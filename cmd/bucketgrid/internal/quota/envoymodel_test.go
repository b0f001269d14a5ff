package quota

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bucketgrid/bucketgrid/clock"
)

// The test Envoy's own cases, each against global_client_impl.cc.

func tokenBucket(max, perFill uint32, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: max, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}
}

// modelEnvoy is a test Envoy holding one bucket, id, that its server has
// never answered; no stream.
func modelEnvoy(t *testing.T) (*envoy, *clock.Fake, map[string]string) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	e := newEnvoy(clk, nil, "model")
	id := map[string]string{"k": "v"}
	bid := &rlqspb.BucketId{Bucket: id}
	e.buckets[canonical(bid)] = &envoyBucket{id: bid, lastReport: clk.Now()}
	return e, clk, id
}

func assign(e *envoy, id map[string]string, s *typev3.RateLimitStrategy, ttl time.Duration) {
	e.apply(&rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqspb.BucketId{Bucket: id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: s}}}}})
}

// admitted is how many of n requests at the clock's time e admits.
func admitted(e *envoy, id map[string]string, n int) int {
	ok := 0
	for range n {
		if e.decide(id) {
			ok++
		}
	}
	return ok
}

// TestEnvoyExpiryKeepsFillRatio: an assignment that expires into a token
// bucket fallback starts the fallback's bucket at the expired bucket's fill
// ratio (onActionExpirationTimer → createTokenBucketFromAction with the
// cached token_bucket_limiter), not full.
func TestEnvoyExpiryKeepsFillRatio(t *testing.T) {
	e, clk, id := modelEnvoy(t)
	e.expired, e.expTTL = tokenBucket(20, 1, 100*time.Second), time.Minute
	assign(e, id, tokenBucket(100, 1, 100*time.Second), 10*time.Second)
	if n := admitted(e, id, 75); n != 75 {
		t.Fatalf("the assignment admitted %d of 75", n)
	}
	clk.Advance(10 * time.Second) // expires: 25.1 of 100 left, so trunc(20 × 0.251) = 5
	if n := admitted(e, id, 20); n != 5 {
		t.Fatalf("the fallback admitted %d at once, want 5 (the expired bucket's fill ratio)", n)
	}
}

// TestEnvoyActionWithoutAssignment: a bucket action with neither a quota
// assignment nor an abandon replaces the cached bucket (its token bucket
// dropped) and its TTL of 0 expires it at once (onQuotaResponseImpl,
// startActionExpirationTimer): the fallback follows, a token bucket
// fallback starting full.
func TestEnvoyActionWithoutAssignment(t *testing.T) {
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	empty := func(e *envoy, id map[string]string) {
		e.apply(&rlqspb.RateLimitQuotaResponse{BucketAction: []*rlqspb.RateLimitQuotaResponse_BucketAction{{
			BucketId: &rlqspb.BucketId{Bucket: id}}}})
	}
	e, clk, id := modelEnvoy(t)
	e.expired, e.expTTL = deny, 30*time.Second
	assign(e, id, tokenBucket(100, 1, 100*time.Second), time.Minute)
	empty(e, id)
	if n := admitted(e, id, 3); n != 0 {
		t.Fatalf("after an action without an assignment: %d admitted, want the DENY_ALL fallback", n)
	}
	clk.Advance(30 * time.Second)
	if n := admitted(e, id, 3); n != 3 {
		t.Fatalf("after the fallback's timeout: %d of 3 admitted, want the default ALLOW_ALL", n)
	}

	e, _, id = modelEnvoy(t)
	e.expired, e.expTTL = tokenBucket(10, 1, 100*time.Second), time.Minute
	assign(e, id, tokenBucket(10, 1, 100*time.Second), time.Minute)
	if n := admitted(e, id, 8); n != 8 {
		t.Fatalf("the assignment admitted %d of 8", n)
	}
	empty(e, id)
	if n := admitted(e, id, 20); n != 10 {
		t.Fatalf("the token bucket fallback admitted %d, want a full one's 10 (the replaced bucket kept no limiter)", n)
	}
}
