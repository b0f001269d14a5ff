package main

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// TestRLQSThroughTheServer: with -rlqs the instance answers a quota stream
// on its gRPC port (under whatever codec and limits the server installs),
// from the same rules and the same grid bucket as the RLS, and shuts down
// with the stream still open.
func TestRLQSThroughTheServer(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"q.yaml": `
domain: q
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
`})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory", "-rlqs")
	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqspb.BucketId{Bucket: map[string]string{"k": "a"}}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	acts := resp.GetBucketAction()
	if len(acts) != 1 || acts[0].GetBucketId().GetBucket()["k"] != "a" {
		t.Fatalf("answer %v, want one action for the bucket", resp)
	}
	qa := acts[0].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil || qa.GetAssignmentTimeToLive().GetSeconds() != 10 || tb.GetFillInterval().GetSeconds() != 5 {
		t.Fatalf("assignment %v, want a token bucket refilled every 5s for 10s", qa)
	}
	// the assignment was paid from the bucket the RLS charges: its burst
	// of 10 is no longer there for an RLS client
	rq := req("q", "k", "a")
	rq.HitsAddend = 10
	r, err := client(t, in.grpcAddr).ShouldRateLimit(ctx, rq)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("RLS answered %v to 10 hits after the quota took the bucket's tokens, want OVER_LIMIT", r.GetOverallCode())
	}
}
