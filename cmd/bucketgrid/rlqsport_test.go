package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

const rlqsPortRules = `
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
`

// envoyReport is the periodic report of an Envoy holding n buckets, as its
// filter builds it (global_client_impl.cc, buildReports): every bucket of
// its cache in one message, each with its counts and time_elapsed.
func envoyReport(domain string, n int) *rlqspb.RateLimitQuotaUsageReports {
	r := &rlqspb.RateLimitQuotaUsageReports{Domain: domain}
	for i := range n {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"api_key": fmt.Sprintf("%032x", i)}},
			NumRequestsAllowed: 12345, NumRequestsDenied: 678, TimeElapsed: durationpb.New(5 * time.Second)})
	}
	return r
}

func quotaStream(t *testing.T, addr string) (grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], context.CancelFunc) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return st, cancel
}

// TestRLQSLargeEnvoyReport: an Envoy holding a stream's most buckets
// (10,000, ids of a 32-byte key) sends them all in one report of about
// 0.7 MiB, ten times -grpc-max-recv: the quota port takes it and answers
// every bucket, while a check on the gRPC port is still held to
// -grpc-max-recv.
func TestRLQSLargeEnvoyReport(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory",
		"-rlqs", "-rlqs-addr", "127.0.0.1:0")
	// a domain without rules: every bucket is answered ALLOW_ALL, so the
	// test weighs the report, not 10,000 grid buckets
	rep := envoyReport("other", 10_000)
	size := proto.Size(rep)
	if size <= 64<<10 {
		t.Fatalf("a report of 10,000 buckets is %d bytes, want it beyond -grpc-max-recv's 64 KiB", size)
	}
	st, cancel := quotaStream(t, in.rlqsAddr)
	defer cancel()
	if err := st.Send(rep); err != nil {
		t.Fatal(err)
	}
	answered := map[string]bool{}
	for len(answered) < 10_000 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("the stream failed after %d of 10,000 buckets answered (report of %d bytes): %v", len(answered), size, err)
		}
		for _, a := range resp.GetBucketAction() {
			answered[a.GetBucketId().GetBucket()["api_key"]] = true
		}
	}
	t.Logf("a report of 10,000 buckets (%d bytes) answered in full", size)

	// the check path keeps its own, smaller bound
	rq := req("api", "api_key", strings.Repeat("x", 100<<10))
	if _, err := call(client(t, in.grpcAddr), rq); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 100 KiB check on the gRPC port: %v, want ResourceExhausted (-grpc-max-recv)", err)
	}
}

// TestRLQSStreamsHaveTheirOwnBudget: quota streams hold their worst case
// for as long as they are open, from -rlqs-max-inflight-bytes: once it is
// full a further stream is refused RESOURCE_EXHAUSTED, and checks, whose
// room is -max-inflight-bytes, are still answered.
func TestRLQSStreamsHaveTheirOwnBudget(t *testing.T) {
	dir := writeConfig(t, t.TempDir(), map[string]string{"api.yaml": rlqsPortRules})
	const perStream = 64<<10 + 1<<20 // -grpc-window plus -rlqs-max-recv
	in := startInstance(t, "-config", dir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "", "-backend", "memory",
		"-rlqs", "-rlqs-addr", "127.0.0.1:0", "-rlqs-max-recv", fmt.Sprint(1<<20),
		"-rlqs-max-inflight-bytes", fmt.Sprint(3*perStream), "-max-inflight-bytes", fmt.Sprint(perStream))
	for i := range 3 {
		st, cancel := quotaStream(t, in.rlqsAddr)
		defer cancel()
		if err := st.Send(envoyReport("api", 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("stream %d within the budget: %v", i, err)
		}
	}
	st, cancel := quotaStream(t, in.rlqsAddr)
	defer cancel()
	st.Send(envoyReport("api", 1))
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream beyond the quota budget: %v, want ResourceExhausted", err)
	}
	r, err := call(client(t, in.grpcAddr), req("api", "api_key", "k"))
	if err != nil || r.GetOverallCode() != 1 { // OK
		t.Fatalf("a check while the quota budget is full: %v, %v; want OK", r, err)
	}
}
