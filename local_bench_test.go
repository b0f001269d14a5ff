package bucketgrid

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"golang.org/x/time/rate"
)

// The benchmarks compare the local bucket with golang.org/x/time/rate on the
// same limit, so large that neither ever rejects (a burst of 2^31-1 tokens
// refilled at one per nanosecond): both pay for a clock read, a lock and the
// refill arithmetic on every call.

const (
	benchRate  = int64(1e9) // tokens per second: 1 per ns, the finest rate core allows
	benchBurst = math.MaxInt32
)

func benchLocal(b *testing.B) *Local {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(benchBurst, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLocal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// Each comparison is one benchmark with a sub-benchmark per contender, so
// the contenders run back to back. Contended (parallel) figures swing between
// runs: compare them within one run only.

func BenchmarkTryConsume(b *testing.B) {
	ctx := context.Background()
	b.Run("bucketgrid", func(b *testing.B) {
		l := benchLocal(b)
		b.ReportAllocs()
		for b.Loop() {
			if ok, _ := l.TryConsume(ctx, 1); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		lim := benchRateLimiter()
		b.ReportAllocs()
		for b.Loop() {
			if !lim.AllowN(time.Now(), 1) {
				b.Fatal("rejected")
			}
		}
	})
}

func BenchmarkTryConsumeParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("bucketgrid", func(b *testing.B) {
		l := benchLocal(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ok, _ := l.TryConsume(ctx, 1); !ok {
					b.Fatal("rejected")
				}
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		lim := benchRateLimiter()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !lim.AllowN(time.Now(), 1) {
					b.Fatal("rejected")
				}
			}
		})
	})
}

func benchRateLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(benchRate), benchBurst)
}

// BenchmarkTryConsumeAt is BenchmarkTryConsume without the clock: each call
// passes a time 1 ns later than the last, so what remains is the lock and
// the refill arithmetic, the part of a check that is the bucket's own.
func BenchmarkTryConsumeAt(b *testing.B) {
	b.Run("bucketgrid", func(b *testing.B) {
		l := benchLocal(b)
		now := l.now()
		b.ReportAllocs()
		for b.Loop() {
			now++
			if ok, _ := l.TryConsumeAt(1, now); !ok {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		lim := benchRateLimiter()
		t := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			t = t.Add(1)
			if !lim.AllowN(t, 1) {
				b.Fatal("rejected")
			}
		}
	})
}
