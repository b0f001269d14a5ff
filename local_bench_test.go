package bucketgrid

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"golang.org/x/time/rate"
)

// The benchmarks compare the local bucket with golang.org/x/time/rate on an
// equivalent limit so large that neither ever rejects: both pay for a clock
// read, a lock and the refill arithmetic on every call.

const benchRate = int64(1e9) // tokens per second: 1 per ns, the finest rate core allows

func benchLocal(b *testing.B) *Local {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(math.MaxInt64/2, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLocal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func BenchmarkLocalTryConsume(b *testing.B) {
	l := benchLocal(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := l.TryConsume(ctx, 1); !ok {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkLocalTryConsumeParallel(b *testing.B) {
	l := benchLocal(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if ok, _ := l.TryConsume(ctx, 1); !ok {
				b.Fatal("rejected")
			}
		}
	})
}

func benchRateLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(benchRate), math.MaxInt32)
}

func BenchmarkXTimeRateAllowN(b *testing.B) {
	lim := benchRateLimiter()
	b.ReportAllocs()
	for b.Loop() {
		if !lim.AllowN(time.Now(), 1) {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkXTimeRateAllowNParallel(b *testing.B) {
	lim := benchRateLimiter()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !lim.AllowN(time.Now(), 1) {
				b.Fatal("rejected")
			}
		}
	})
}
