package service

import (
	"context"
	"fmt"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/bucketgrid/bucketgrid"
	"github.com/bucketgrid/bucketgrid/cas"
	"github.com/bucketgrid/bucketgrid/cas/memstore"
	"github.com/bucketgrid/bucketgrid/cmd/bucketgrid/internal/metrics"
	"github.com/bucketgrid/bucketgrid/policy"
	"github.com/bucketgrid/bucketgrid/policy/rulefile"
)

// BenchmarkShouldRateLimit measures the service's own request path —
// converting Envoy's request, matching, planning, the Manager, deciding,
// building the answer and its headers, metrics — on buckets in memory
// (cas over memstore), with no gRPC and no grid: one descriptor per
// request, over 10,000 values of one rule, with and without the IETF
// headers.
func BenchmarkShouldRateLimit(b *testing.B) {
	const yaml = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 1000000}
`
	cfg, err := rulefile.Load([]rulefile.File{{Name: "bench.yaml", Data: []byte(yaml)}}, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlspb.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = req("bench", "user", fmt.Sprintf("user-%d", i))
	}
	for _, h := range []struct {
		name    string
		headers policy.Headers
	}{{"headers=none", 0}, {"headers=ietf", policy.IETFHeaders}} {
		b.Run(h.name, func(b *testing.B) {
			s := New(Options{
				Manager: bucketgrid.NewManager(cas.New(memstore.New())),
				Headers: h.headers,
				Metrics: metrics.New(1000),
			})
			s.SetConfig(cfg)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
