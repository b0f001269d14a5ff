package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// wideRequest is a check of n descriptors, each one entry of a key no rule
// names and a value of 3,000 bytes: every descriptor alone is decided OK
// (an unknown key is unlimited), so only the message's size can refuse it.
func wideRequest(n int) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: "srv"}
	for range n {
		r.Descriptors = append(r.Descriptors, &ratelimitpb.RateLimitDescriptor{
			Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "unnamed", Value: strings.Repeat("v", 3000)}}})
	}
	return r
}

// TestOversizedCheckIsOverLimit: a check whose message is over
// -grpc-max-recv (64 KiB) but within -grpc-max-read is answered
// OVER_LIMIT, never an error that Envoy's failure_mode_deny: false would
// let through; one under it is decided as usual. Many at once all get
// OVER_LIMIT and the budget has everything back once they end. Before,
// grpc-go answered RESOURCE_EXHAUSTED before the handler ran.
func TestOversizedCheckIsOverLimit(t *testing.T) {
	in, _ := memoryInstance(t)
	c := client(t, in.grpcAddr)
	small, large := wideRequest(10), wideRequest(40)
	if n := proto.Size(large); n <= 64<<10 || n > 256<<10 {
		t.Fatalf("the large check is %d bytes, want it over -grpc-max-recv and within -grpc-max-read", n)
	}
	if resp, err := call(c, small); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("a check of %d bytes: %v %v, want OK", proto.Size(small), resp, err)
	}
	if resp, err := call(c, large); err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a check of %d bytes: %v %v, want OVER_LIMIT", proto.Size(large), resp, err)
	}

	const calls = 200
	var wg sync.WaitGroup
	errs := make(chan string, calls)
	for range calls {
		wg.Go(func() {
			resp, err := call(c, large)
			if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				errs <- resp.GetOverallCode().String() + " " + errString(err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("one of %d oversized checks at once: %s, want OVER_LIMIT", calls, e)
	}
	const inflight = `bucketgrid_rls_budget_inflight_bytes{budget="checks"}`
	deadline := time.Now().Add(time.Minute)
	for metricLine(t, in, inflight) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("after the oversized checks ended the budget still holds %s bytes", metricLine(t, in, inflight))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
