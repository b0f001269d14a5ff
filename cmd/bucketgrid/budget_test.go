package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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

// TestBudgetRefusalsAreCounted: with checks whose messages never come
// holding the whole budget (from eight addresses, see fillWithStalled), and
// /metrics counts each request refused meanwhile by its answer: a check
// answered OVER_LIMIT unread, a health check refused RESOURCE_EXHAUSTED, a
// /json request answered 503.
func TestBudgetRefusalsAreCounted(t *testing.T) {
	const limit = 64<<10 + 256<<10 // the least -max-inflight-bytes: -grpc-window plus -grpc-max-read
	in, _ := memoryInstance(t, "-max-inflight-bytes", strconv.Itoa(limit), "-grpc-read-timeout", "1h")
	cc, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := metricLine(t, in, `bucketgrid_rls_budget_limit_bytes{budget="checks"}`); got != strconv.Itoa(limit) {
		t.Fatalf("budget_limit_bytes %q, want %d", got, limit)
	}
	fillWithStalled(ctx, t, in, limit, 8, nil) // a small budget: the shares leave room after 5
	const inflight = `bucketgrid_rls_budget_inflight_bytes{budget="checks"}`
	if got, _ := strconv.Atoi(metricLine(t, in, inflight)); got+streamBytes <= limit {
		t.Fatalf("the stalled checks hold %d bytes of %d, room for another call", got, limit)
	}
	over, _ := strconv.Atoi(metricLine(t, in, `bucketgrid_rls_budget_refusals_total{answer="over_limit",budget="checks"}`))

	resp, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req("srv", "k", "v"))
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check over the budget: %v %v, want OVER_LIMIT", resp, err)
	}
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a health check over the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	for range 2 {
		r, err := http.Post("http://"+in.httpAddr+"/json", "application/json", strings.NewReader(strings.Repeat(" ", streamBytes)+`{"domain": "srv"}`)) // more than the room left
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a /json request over the budget: %d, want 503", r.StatusCode)
		}
	}
	for answer, want := range map[string]string{"over_limit": strconv.Itoa(over + 1), "resource_exhausted": "1", "unavailable": "2"} {
		if got := metricLine(t, in, `bucketgrid_rls_budget_refusals_total{answer="`+answer+`",budget="checks"}`); got != want {
			t.Errorf("budget_refusals_total{answer=%q} = %q, want %s", answer, got, want)
		}
	}
}
