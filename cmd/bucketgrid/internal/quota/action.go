package quota

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokenBucketAction assigns a token bucket of maxTokens refilled at g
// tokens per period. Envoy's filter reads the fill interval in whole
// seconds and compares only its nanos when deciding whether an assignment
// is the same (global_client_impl.cc), so the interval is the period
// itself, always whole seconds: the same g and maxTokens again keep the
// Envoy's bucket state, anything else replaces it.
func tokenBucketAction(id *rlqspb.BucketId, g, maxTokens int64, period, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{
			MaxTokens:     uint32(min(maxTokens, 1<<32-1)),
			TokensPerFill: wrapperspb.UInt32(uint32(min(g, 1<<32-1))),
			FillInterval:  durationpb.New(period),
		}}})
}

// blanketAction assigns ALLOW_ALL or DENY_ALL.
func blanketAction(id *rlqspb.BucketId, allow bool, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	rule := typev3.RateLimitStrategy_DENY_ALL
	if allow {
		rule = typev3.RateLimitStrategy_ALLOW_ALL
	}
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}})
}

// assignment wraps a strategy with its time to live. Envoy reads the TTL's
// whole seconds only (an unset or sub-second TTL expires at once in some
// versions), so ttl is always whole seconds.
func assignment(id *rlqspb.BucketId, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    s,
			}},
	}
}

// abandonAction tells Envoy to forget the bucket: its next request for it
// subscribes afresh.
func abandonAction(id *rlqspb.BucketId) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}
