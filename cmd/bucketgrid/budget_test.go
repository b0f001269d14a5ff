package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/wire"
)

// metricLine returns the value of the series named name (with its labels,
// as the text format writes them) in /metrics, or "" without one.
func metricLine(t *testing.T, in *instance, name string) string {
	t.Helper()
	for line := range strings.Lines(metricsText(t, in)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return v
		}
	}
	return ""
}

// TestBudgetRefusalsAreCounted: with -max-inflight-bytes room for one gRPC
// call, a check whose message never comes holds the whole budget, and
// /metrics counts each request refused meanwhile by its answer: a check
// answered OVER_LIMIT unread, a health check refused RESOURCE_EXHAUSTED, a
// /json request answered 503.
func TestBudgetRefusalsAreCounted(t *testing.T) {
	const perCall = 64<<10 + 64<<10 // -grpc-window plus -grpc-max-read
	in, _ := memoryInstance(t, "-max-inflight-bytes", "131072", "-grpc-max-read", "65536")
	cc, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := metricLine(t, in, `bucketgrid_rls_budget_limit_bytes{budget="checks"}`); got != "131072" {
		t.Fatalf("budget_limit_bytes %q, want 131072", got)
	}
	hctx, hold := context.WithCancel(ctx)
	defer hold()
	if _, err := cc.NewStream(hctx, &grpc.StreamDesc{StreamName: "ShouldRateLimit"}, wire.ShouldRateLimit); err != nil {
		t.Fatal(err)
	}
	const inflight = `bucketgrid_rls_budget_inflight_bytes{budget="checks"}`
	for metricLine(t, in, inflight) != "131072" { // the headers arrive asynchronously
		if ctx.Err() != nil {
			t.Fatalf("the unfinished check holds %q bytes, want %d", metricLine(t, in, inflight), perCall)
		}
		time.Sleep(10 * time.Millisecond)
	}

	resp, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req("srv", "k", "v"))
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check over the budget: %v %v, want OVER_LIMIT", resp, err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a health check over the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	for range 2 {
		r, err := http.Post("http://"+in.httpAddr+"/json", "application/json", strings.NewReader(`{"domain": "srv"}`))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a /json request over the budget: %d, want 503", r.StatusCode)
		}
	}
	for answer, want := range map[string]string{"over_limit": "1", "resource_exhausted": "1", "unavailable": "2"} {
		if got := metricLine(t, in, `bucketgrid_rls_budget_refusals_total{answer="`+answer+`",budget="checks"}`); got != want {
			t.Errorf("budget_refusals_total{answer=%q} = %q, want %s", answer, got, want)
		}
	}
}
