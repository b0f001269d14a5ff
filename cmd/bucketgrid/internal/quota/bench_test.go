package quota

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

const benchRules = `
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
`

func benchIDs(n int) []map[string]string {
	ids := make([]map[string]string, n)
	for i := range ids {
		ids[i] = map[string]string{"tenant": fmt.Sprintf("t%05d", i)}
	}
	return ids
}

// BenchmarkReport is the server's CPU for one Envoy's periodic report of
// buckets it already subscribed (reported per bucket too), without the
// network.
func BenchmarkReport(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			f := newFleet(b, benchRules, Options{})
			st := &stream{out: make(chan *rlqspb.RateLimitQuotaResponse, 1<<20), subs: map[string]*sub{}}
			f.srv.mu.Lock()
			f.srv.streams[st] = struct{}{}
			f.srv.mu.Unlock()
			r := &rlqspb.RateLimitQuotaUsageReports{Domain: "bench"}
			for _, id := range benchIDs(n) {
				r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 40, NumRequestsDenied: 2,
					TimeElapsed: durationpb.New(5 * time.Second)})
			}
			ctx := context.Background()
			f.srv.report(ctx, st, r) // subscribes them
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f.clk.Advance(5 * time.Second)
				f.srv.report(ctx, st, r)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/bucket")
		})
	}
}

// BenchmarkPeriod is the server's CPU for one period (rebalancing,
// paying from the grid bucket, renewing) per bucket, with envoys Envoys
// reporting each bucket, on the memory grid.
func BenchmarkPeriod(b *testing.B) {
	for _, c := range []struct{ buckets, envoys int }{{100, 1}, {100, 10}} {
		b.Run(fmt.Sprintf("buckets=%d/envoys=%d", c.buckets, c.envoys), func(b *testing.B) {
			f := newFleet(b, benchRules, Options{})
			ctx := context.Background()
			ids := benchIDs(c.buckets)
			var streams []*stream
			var reports []*rlqspb.RateLimitQuotaUsageReports
			for range c.envoys {
				st := &stream{out: make(chan *rlqspb.RateLimitQuotaResponse, 1<<20), subs: map[string]*sub{}}
				f.srv.mu.Lock()
				f.srv.streams[st] = struct{}{}
				f.srv.mu.Unlock()
				r := &rlqspb.RateLimitQuotaUsageReports{Domain: "bench"}
				for _, id := range ids {
					r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
						BucketId: &rlqspb.BucketId{Bucket: id}, NumRequestsAllowed: 1})
				}
				f.srv.report(ctx, st, r)
				streams = append(streams, st)
				reports = append(reports, periodic(r))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				f.clk.Advance(5 * time.Second)
				for i, st := range streams { // Envoy reports every bucket every 5 s
					f.srv.report(ctx, st, reports[i])
				}
				b.StartTimer()
				f.srv.tick(ctx)
				for _, st := range streams {
					for len(st.out) > 0 {
						<-st.out
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.buckets), "ns/bucket")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.buckets*c.envoys), "ns/assignment")
		})
	}
}

// periodic is r as a periodic report: 5 s elapsed, 40 requests each.
func periodic(r *rlqspb.RateLimitQuotaUsageReports) *rlqspb.RateLimitQuotaUsageReports {
	out := &rlqspb.RateLimitQuotaUsageReports{Domain: r.Domain}
	for _, u := range r.BucketQuotaUsages {
		out.BucketQuotaUsages = append(out.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: u.BucketId, NumRequestsAllowed: 40, TimeElapsed: durationpb.New(5 * time.Second)})
	}
	return out
}

// BenchmarkFleet50 is 50 simulated Envoys over loopback gRPC, each
// holding 20 buckets of one rule and sending its traffic (10 requests a
// second per bucket, decided locally): one op is 5 s of fake time, that is
// every Envoy's report and one period, all in this process (clients
// included in the CPU).
func BenchmarkFleet50(b *testing.B) {
	f := newFleet(b, benchRules, Options{})
	ids := benchIDs(20)
	for range 50 {
		e := f.envoy("bench")
		for _, id := range ids {
			e.decide(id)
		}
	}
	f.settle()
	var decided int64
	before := f.srv.Stats().Reports
	cpu0 := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for range 50 {
			f.clk.Advance(100 * time.Millisecond)
			for _, e := range f.envoys {
				for _, id := range ids {
					e.decide(id) // 10 a second per bucket, 200 per Envoy
					decided++
				}
			}
			f.step(0)
		}
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	st := f.srv.Stats()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
	b.ReportMetric(float64(st.Reports-before)/float64(b.N), "reports/op")
	b.ReportMetric(float64(decided)/float64(b.N), "decisions/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
