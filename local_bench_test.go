package bucketgrid

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketgrid/bucketgrid/core"
	"github.com/sethvargo/go-limiter/memorystore"
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

// The keyed benchmarks take one token per call from 100k per-client buckets
// in round-robin order (every bucket exists before timing starts), against
// github.com/sethvargo/go-limiter's memory store on the same keys.

const benchKeys = 100_000

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}

func benchLocalMap(b *testing.B, keys []string) *LocalMap {
	b.Helper()
	cfg, err := core.NewConfig(core.Greedy(math.MaxInt64/2, benchRate, time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m := NewLocalMap(func(string) (core.Config, error) { return cfg, nil },
		WithMaxEntries(4*benchKeys), WithIdleTimeout(time.Hour))
	for _, k := range keys {
		if _, err := m.Bucket(k); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

func BenchmarkLocalMap100kKeys(b *testing.B) {
	keys := benchKeyNames()
	m := benchLocalMap(b, keys)
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if ok, _ := m.TryConsume(ctx, keys[i], 1); !ok {
			b.Fatal("rejected")
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

func BenchmarkLocalMap100kKeysParallel(b *testing.B) {
	keys := benchKeyNames()
	m := benchLocalMap(b, keys)
	ctx := context.Background()
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(benchKeys/8)) % benchKeys
		for pb.Next() {
			if ok, _ := m.TryConsume(ctx, keys[i], 1); !ok {
				b.Fatal("rejected")
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

func benchGoLimiter(b *testing.B, keys []string) interface {
	Take(context.Context, string) (uint64, uint64, uint64, bool, error)
	Close(context.Context) error
} {
	b.Helper()
	store, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: 24 * time.Hour,
		InitialAlloc: benchKeys})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if _, _, _, ok, err := store.Take(ctx, k); !ok || err != nil {
			b.Fatal("go-limiter rejected", err)
		}
	}
	b.Cleanup(func() { store.Close(ctx) })
	return store
}

func BenchmarkGoLimiter100kKeys(b *testing.B) {
	keys := benchKeyNames()
	store := benchGoLimiter(b, keys)
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, _, ok, _ := store.Take(ctx, keys[i]); !ok {
			b.Fatal("rejected")
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

func BenchmarkGoLimiter100kKeysParallel(b *testing.B) {
	keys := benchKeyNames()
	store := benchGoLimiter(b, keys)
	ctx := context.Background()
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(benchKeys/8)) % benchKeys
		for pb.Next() {
			if _, _, _, ok, _ := store.Take(ctx, keys[i]); !ok {
				b.Fatal("rejected")
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}
